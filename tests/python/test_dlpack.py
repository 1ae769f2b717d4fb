"""DLPack round trips: the engine reads and writes the caller's memory."""

import ctypes

import pytest
import torch

import h3stream
from conftest import bits, block_inputs, needs_cuda, streamed_options

# Small chunks and min_tokens 0: the streamed block (which writes x in place chunk by
# chunk) really runs at these lengths.
STREAM = streamed_options(q_chunk=16, kv_chunk=16, mlp_chunk=16)


def test_x_is_updated_in_place_without_copies(engine):
    eng = engine("bf16")
    x, t_emb, runs, rope = block_inputs(eng.config, 67, seed=1)
    ref = x.clone()
    eng.run_block(0, ref, t_emb, runs, rope, mode="stock")
    ptr, storage = x.data_ptr(), x.untyped_storage().data_ptr()
    assert eng.run_block(0, x, t_emb, runs, rope, options=STREAM) == "streamed"
    assert x.data_ptr() == ptr and x.untyped_storage().data_ptr() == storage
    assert torch.equal(bits(x), bits(ref))


def test_row_view_of_a_larger_buffer_is_written_through(engine):
    """A view at an offset: the engine writes exactly rows [8, 8 + S) of the buffer."""
    eng = engine("int8")
    x, t_emb, runs, rope = block_inputs(eng.config, 67, seed=2)
    buf = torch.randn(67 + 20, x.shape[1]).to(torch.bfloat16)
    buf[8:75] = x
    before = buf.clone()
    view = buf[8:75]
    assert view.is_contiguous() and view.data_ptr() != buf.data_ptr()
    assert eng.run_block(0, view, t_emb, runs, rope, options=STREAM) == "streamed"
    ref = x.clone()
    eng.run_block(0, ref, t_emb, runs, rope, mode="stock")
    assert torch.equal(bits(buf[8:75]), bits(ref))
    assert torch.equal(bits(buf[:8]), bits(before[:8]))
    assert torch.equal(bits(buf[75:]), bits(before[75:]))


def test_inputs_are_not_modified(engine):
    eng = engine("w4a8")
    x, t_emb, runs, rope = block_inputs(eng.config, 40, seed=3)
    t0, r0 = t_emb.clone(), rope.clone()
    assert eng.run_block(1, x, t_emb, runs, rope, options=STREAM) == "streamed"
    assert torch.equal(bits(t_emb), bits(t0)) and torch.equal(bits(rope), bits(r0))


def test_tensors_requiring_grad_are_accepted(engine):
    eng = engine("bf16")
    x, t_emb, runs, rope = block_inputs(eng.config, 30, seed=4)
    ref = x.clone()
    eng.run_block(0, ref, t_emb, runs, rope, options=STREAM)
    x.requires_grad_(True)
    with torch.no_grad():
        eng.run_block(0, x, t_emb.requires_grad_(False), runs, rope, options=STREAM)
    assert torch.equal(bits(x.detach()), bits(ref))


# ---- a DLPack producer that claims CUDA memory (no GPU needed) --------------


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class FakeCudaArray:
    """Describes a bf16 [rows, cols] array on cuda:0; its pointer is never read."""

    def __init__(self, rows, cols, device_type=2):
        self._shape = (ctypes.c_int64 * 2)(rows, cols)
        self._managed = _DLManagedTensor()
        t = self._managed.dl_tensor
        t.data = 0x10000  # never dereferenced: the device check comes first
        t.device = _DLDevice(device_type, 0)
        t.ndim = 2
        t.dtype = _DLDataType(4, 16, 1)  # bfloat16
        t.shape = self._shape
        self.shape = (rows, cols)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        if max_version is not None:
            raise TypeError("unversioned only")  # nanobind falls back to the plain capsule
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self._managed), b"dltensor", None)

    def __dlpack_device__(self):
        return (self._managed.dl_tensor.device.device_type, 0)


def test_cuda_memory_on_a_cpu_engine_is_refused(engine):
    eng = engine("bf16")
    x, t_emb, runs, rope = block_inputs(eng.config, 16, seed=5)
    fake = FakeCudaArray(16, eng.config["hidden"])
    with pytest.raises(ValueError, match=r"x: is on cuda but this engine runs on cpu"):
        eng.run_block(0, fake, t_emb, runs, rope)


def test_unsupported_device_is_named(engine):
    eng = engine("bf16")
    x, t_emb, runs, rope = block_inputs(eng.config, 16, seed=5)
    fake = FakeCudaArray(16, eng.config["hidden"], device_type=4)  # OpenCL
    with pytest.raises(ValueError, match=r"x: lives on dlpack device type 4"):
        eng.run_block(0, fake, t_emb, runs, rope)


@needs_cuda
def test_cuda_streamed_equals_cuda_stock_on_a_side_stream(engine, checkpoint):
    """On the GPU machine: the CUDA engine on torch's current stream, in place; streamed ==
    stock on the GPU bit for bit (also with weights leaving the GPU after each call), and
    near the CPU reference (GPU and CPU sum in different orders: the int8 block update
    differs by ~0.024 relative RMS, tests/gpu bound 4e-2)."""
    cpu = engine("int8")
    gpu = h3stream.Engine.from_checkpoint(checkpoint("int8"), backend="cuda")
    x, t_emb, runs, rope = block_inputs(cpu.config, 300, seed=6)
    ref = x.clone()
    cpu.run_block(0, ref, t_emb, runs, rope, mode="stock")
    stock = x.cuda()
    gpu.run_block(0, stock, t_emb.cuda(), runs, rope.cuda(), mode="stock")
    torch.cuda.synchronize()
    opts = streamed_options(q_chunk=37, kv_chunk=41, mlp_chunk=43)
    for resident in (True, False):
        gpu.resident_weights = resident
        xg = x.cuda()
        ptr = xg.data_ptr()
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            assert gpu.run_block(0, xg, t_emb.cuda(), runs, rope.cuda(), options=opts) == "streamed"
        s.synchronize()
        assert xg.data_ptr() == ptr
        assert torch.equal(bits(xg.cpu()), bits(stock.cpu())), f"resident_weights={resident}"
    upd_gpu = stock.cpu().float() - x.float()
    upd_cpu = ref.float() - x.float()
    rel = ((upd_gpu - upd_cpu).pow(2).sum() / upd_cpu.pow(2).sum()).sqrt().item()
    assert rel < 4e-2, rel
    with pytest.raises(ValueError, match="x: is on cpu but this engine runs on cuda"):
        gpu.run_block(0, x, t_emb.cuda(), runs, rope.cuda())
