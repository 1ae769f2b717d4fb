"""What a 16 GB user meets over a long step, against the fakes of test_nodes_fake.py: the
refusal before any work when h3stream's buffers cannot fit, a log line per block on long
steps, ComfyUI's interrupt honoured between blocks, a batch of rows run through the engine
(cfg > 1 batching cond and uncond), and the budget the node gives the engine inside ComfyUI's
dynamic VRAM (comfy_budget.py)."""

import logging
import sys
import types

import pytest

from conftest import need
from test_nodes_fake import FakePatcher, S_HIDDEN, fake_forward, make_fake_h3, pack, streamed  # noqa: F401

torch = need("torch")
GIB = 2**30


def engine_of(pack):
    ns = streamed(pack)
    return ns._engines[next(iter(ns._engines))][1]


def test_a_step_that_cannot_fit_is_refused_before_any_block_runs(pack):
    h3 = make_fake_h3()
    need_msg = ("vram_budget 1.00 GiB cannot hold this block call's own memory at 64 tokens: its "
                "smallest placement (staged K/V) needs 7.25 GiB")
    calls = []

    def refuse(self, index, x, *a, **k):
        calls.append(index)
        raise MemoryError(need_msg)

    h3.Engine.run_block = refuse
    m = streamed(pack).apply_streamed(FakePatcher(), {"min_tokens": 0}, h3=h3)
    with pytest.raises(MemoryError) as e:
        fake_forward(m)
    msg = str(e.value)
    # one message: which block, the engine's need, and the controls that change it
    assert msg.startswith("H3 Streamed Blocks cannot run block 0 at 64 tokens")
    assert "needs 7.25 GiB" in msg
    for control in ("vram_budget", "kv_store kvi8s", "q_chunk", "kv_placement host"):
        assert control in msg, control
    assert calls == [0]  # block 0 refused: no later block was tried


def test_long_steps_log_a_line_per_block_short_ones_do_not(pack, caplog, monkeypatch):
    h3 = make_fake_h3()
    ns = streamed(pack)
    m = ns.apply_streamed(FakePatcher(), {"min_tokens": 0, "final_layer_chunk": 0}, h3=h3)
    monkeypatch.setattr(ns._Progress, "LONG_BLOCK_S", 0.0)  # every block counts as long
    with caplog.at_level(logging.INFO, logger="h3stream.comfyui"):
        fake_forward(m)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("[h3stream]")]
    assert len(lines) == 2, lines  # the fake model has 2 blocks
    assert lines[0].startswith("[h3stream] 64 tokens, 2 blocks: block 1 in ")
    assert lines[1].startswith("[h3stream] block 2/2 done in ")
    caplog.clear()
    # short blocks: block 0's line and the last block's, not one per block
    from test_nodes_fake import FakeDM

    p = FakePatcher()
    p.model.diffusion_model = FakeDM(blocks=5)
    m = ns.apply_streamed(p, {"min_tokens": 0, "final_layer_chunk": 0}, h3=h3)
    monkeypatch.setattr(ns._Progress, "LONG_BLOCK_S", 3600.0)
    with caplog.at_level(logging.INFO, logger="h3stream.comfyui"):
        fake_forward(m)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("[h3stream]")]
    assert len(lines) == 2, lines
    assert lines[0].startswith("[h3stream] 64 tokens, 5 blocks: block 1 in ")
    assert lines[1].startswith("[h3stream] block 5/5 done in ")


class Interrupted(BaseException):
    """ComfyUI's InterruptProcessingException derives from BaseException too."""


def test_interrupt_is_honoured_between_blocks(pack, monkeypatch):
    h3 = make_fake_h3()
    m = streamed(pack).apply_streamed(FakePatcher(), {"min_tokens": 0}, h3=h3)
    mm = sys.modules["comfy.model_management"]
    state = {"blocks": 0}

    def check():
        if state["blocks"] >= 1:  # the user pressed cancel while block 0 ran
            raise Interrupted()

    monkeypatch.setattr(mm, "throw_exception_if_processing_interrupted", check, raising=False)
    real = h3.Engine.run_block

    def counted(self, *a, **k):
        state["blocks"] += 1
        return real(self, *a, **k)

    h3.Engine.run_block = counted
    with pytest.raises(Interrupted):
        fake_forward(m)
    assert [c[0] for c in engine_of(pack).calls] == [0]  # block 1 never started


def batched_forward(patcher, B=2, S=64, per_row_t=True):
    """The block loop with a batch of B rows [B, S, hidden] (cfg > 1 batching cond and
    uncond); ComfyUI's block would double x in place."""
    to = patcher.model_options["transformer_options"]
    x = torch.full((B, S, S_HIDDEN), 1.0, dtype=torch.bfloat16)
    x[1] = 5.0
    rope = torch.randn(1, S, 1, 48, 2, 2).to(torch.bfloat16)
    t_emb = torch.randn(B, 1, 8, dtype=torch.bfloat16) if per_row_t else torch.randn(1, 8).to(torch.bfloat16)
    fell_back = []

    def original(args):
        fell_back.append(tuple(args["img"].shape))
        return {"img": args["img"].mul_(2)}

    for i in range(len(patcher.model.diffusion_model.blocks)):
        rep = to["patches_replace"]["dit"][("double_block", i)]
        x = rep({"img": x, "t_emb": t_emb, "mod_segments": [(0, S, 0)], "rope_freqs": rope,
                 "transformer_options": to}, {"original_block": original})["img"]
    return x, t_emb, fell_back


@pytest.mark.parametrize("per_row_t", [True, False])
def test_a_batch_of_rows_runs_each_row_through_the_engine(pack, per_row_t):
    h3 = make_fake_h3()
    seen_t = []
    real = h3.Engine.run_block

    def keep_t(self, index, x, t_emb, *a, **k):
        assert x.dim() == 2 and x.is_contiguous()
        seen_t.append(t_emb)
        return real(self, index, x, t_emb, *a, **k)

    h3.Engine.run_block = keep_t
    m = streamed(pack).apply_streamed(FakePatcher(), {"min_tokens": 0}, h3=h3)
    x, t_emb, fell_back = batched_forward(m, per_row_t=per_row_t)
    assert fell_back == []  # no row ran ComfyUI's block
    # each row went through the engine once per block (the fake adds 1 in place)
    assert torch.all(x[0] == 3) and torch.all(x[1] == 7)
    calls = engine_of(pack).calls
    assert [(c[0], c[3]) for c in calls] == [(0, 64), (0, 64), (1, 64), (1, 64)]
    want = [t_emb[0], t_emb[1]] * 2 if per_row_t else [t_emb] * 4
    assert all(torch.equal(a, b) for a, b in zip(seen_t, want))


def test_a_row_below_min_tokens_runs_comfyui_block_on_that_row(pack):
    m = streamed(pack).apply_streamed(FakePatcher(), {"min_tokens": 100}, h3=make_fake_h3())
    x, _t, fell_back = batched_forward(m)
    assert fell_back == [(64, S_HIDDEN)] * 4  # per row and block, as a 2-D call
    assert torch.all(x[0] == 4) and torch.all(x[1] == 20)


# -- the budget inside ComfyUI ------------------------------------------------------------
def _fake_aimdo(monkeypatch, enabled, resident):
    """ComfyUI's dynamic VRAM as the budget reads it: one loaded model whose VBAR on cuda:0
    holds `resident` bytes (listed twice, as a patcher and its clone share the model, and a
    VBAR on another device beside it, neither of which may count)."""
    cmm = types.ModuleType("comfy.memory_management")
    cmm.aimdo_enabled = enabled

    class Vbar:
        def __init__(self, n):
            self.n = n

        def loaded_size(self):
            return self.n

    model = types.SimpleNamespace(dynamic_vbars={torch.device("cuda", 0): Vbar(resident),
                                                 torch.device("cuda", 1): Vbar(7 * GIB)})
    loaded = [types.SimpleNamespace(model=types.SimpleNamespace(model=model))] * 2
    mm = sys.modules["comfy.model_management"]
    monkeypatch.setitem(sys.modules, "comfy.memory_management", cmm)
    monkeypatch.setattr(mm, "current_loaded_models", loaded, raising=False)
    monkeypatch.setattr(mm, "extra_reserved_memory", lambda: GIB // 2, raising=False)


def test_budget_counts_the_weights_dynamic_vram_can_give_back(pack, monkeypatch):
    budget_mod = sys.modules["h3s_comfyui_pack.comfy_budget"]
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1 * GIB, 16 * GIB))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 0)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 0)
    dev = torch.device("cuda", 0)
    _fake_aimdo(monkeypatch, enabled=True, resident=9 * GIB)
    budget, parts = budget_mod.device_budget(dev, held_bytes=GIB)
    # free 1 + evictable 9 - held 1 - reserve 0.5 = 8.5 GiB, less a twentieth (>= 512 MiB)
    assert parts["free"] == GIB and parts["comfy_offloadable"] == 9 * GIB
    assert budget == int(8.5 * GIB) - max(int(8.5 * GIB) // 20, 512 * 2**20)
    _fake_aimdo(monkeypatch, enabled=False, resident=9 * GIB)
    budget, parts = budget_mod.device_budget(dev)  # classic ModelPatcher: free memory only
    # free 1 - reserve 0.5 = 0.5 GiB is within the 512 MiB margin: nothing left to give
    assert parts["comfy_offloadable"] == 0 and budget == 0
    assert "model weights ComfyUI can offload" in budget_mod.describe(parts)


def test_each_gpu_call_gets_the_budget_of_that_moment(pack, monkeypatch):
    ns = streamed(pack)
    h3 = make_fake_h3()

    class Opts:
        def __init__(self, **kw):
            self.kw, self.vram_budget = kw, kw["vram_budget"]

    h3.Options = Opts
    m = ns.apply_streamed(FakePatcher(), {"min_tokens": 0}, h3=h3)
    run = m.model_options["transformer_options"]["patches_replace"]["dit"][("double_block", 0)].run
    budgets = iter([(5 * GIB, {"budget": 5 * GIB}), (2 * GIB, {"budget": 2 * GIB})])
    monkeypatch.setattr(sys.modules["h3s_comfyui_pack.comfy_budget"], "device_budget",
                        lambda device, held: next(budgets))
    gpu_x = types.SimpleNamespace(is_cuda=True, device="cuda:0")
    block = m.model.diffusion_model.blocks[0]
    assert run.call_options(0, block, gpu_x).vram_budget == 5 * GIB
    assert run.call_options(0, block, gpu_x).vram_budget == 2 * GIB
    assert run.options.vram_budget == 0  # the node's own options are not changed
    given = ns.apply_streamed(FakePatcher(), {"min_tokens": 0, "vram_budget": 3000}, h3=h3)
    run2 = given.model_options["transformer_options"]["patches_replace"]["dit"][("double_block", 0)].run
    assert run2.call_options(0, block, gpu_x).vram_budget == 3000 << 20  # a given budget stands


def test_pytorch_cache_goes_back_to_the_driver_before_the_budget(pack, monkeypatch):
    """ComfyUI's final layer leaves its fp32 span in PyTorch's cache between steps: the
    budget hands it back first (h3stream allocates from the driver) and counts it free."""
    budget_mod = sys.modules["h3s_comfyui_pack.comfy_budget"]
    state = {"reserved": 12 * GIB, "free": GIB // 2}
    allocated = 3 * GIB

    def empty_cache():
        state["free"] += state["reserved"] - allocated
        state["reserved"] = allocated

    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: state["reserved"])
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: allocated)
    monkeypatch.setattr(torch.cuda, "empty_cache", empty_cache)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (state["free"], 80 * GIB))
    _fake_aimdo(monkeypatch, enabled=False, resident=0)
    budget, parts = budget_mod.device_budget(torch.device("cuda", 0))
    assert parts["torch_cache_released"] == 9 * GIB and parts["free"] == int(9.5 * GIB)
    assert "of PyTorch's cache released" in budget_mod.describe(parts)
    # a small cache stays: emptying it on every call would cost the allocator its reuse
    state.update(reserved=allocated + 100 * 2**20, free=GIB)
    _budget, parts = budget_mod.device_budget(torch.device("cuda", 0))
    assert parts["torch_cache_released"] == 0 and parts["free"] == GIB


def test_budget_names_what_else_holds_the_card(pack, monkeypatch):
    """The plan line and a refusal say what holds the card beside h3stream: PyTorch's tensors
    and cache, ComfyUI's cast buffers (comfy-aimdo's, outside PyTorch's allocator)."""
    budget_mod = sys.modules["h3s_comfyui_pack.comfy_budget"]
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (4 * GIB, 16 * GIB))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 3 * GIB + GIB // 4)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 3 * GIB)
    monkeypatch.setattr(torch.cuda, "get_allocator_backend", lambda: "cudaMallocAsync",
                        raising=False)
    _fake_aimdo(monkeypatch, enabled=False, resident=0)

    class CastBuffer:  # comfy_aimdo.vram_buffer.VRAMBuffer's size()
        def __init__(self, n, device):
            self.n, self.device = n, device

        def size(self):
            return self.n

    mm = sys.modules["comfy.model_management"]
    monkeypatch.setattr(mm, "STREAM_AIMDO_CAST_BUFFERS",
                        {"s1": CastBuffer(GIB, 0), "s2": CastBuffer(GIB // 2, 0),
                         "other": CastBuffer(7 * GIB, 1)}, raising=False)
    _budget, parts = budget_mod.device_budget(torch.device("cuda", 0))
    assert parts["comfy_cast_buffers"] == GIB + GIB // 2  # cuda:1's buffer is not this card's
    text = budget_mod.describe(parts)
    assert "PyTorch's tensors 3.00 GiB + its cache 0.25 GiB" in text
    assert "ComfyUI's cast buffers 1.50 GiB" in text
    assert budget_mod.allocator_hint(parts) == ""  # cudaMallocAsync hands its cache back


def test_refusal_names_the_native_allocator_when_its_cache_is_stuck(pack, monkeypatch):
    """Under PyTorch's native allocator a cache empty_cache() cannot hand back (segments are
    freed only whole) is named, with the fix; a small one, or the async allocator's, is not."""
    budget_mod = sys.modules["h3s_comfyui_pack.comfy_budget"]
    stuck = {"torch_allocator": "native", "torch_reserved": 9 * GIB, "torch_allocated": 3 * GIB}
    hint = budget_mod.allocator_hint(stuck)
    assert "6.00 GiB" in hint and "--disable-cuda-malloc" in hint
    assert budget_mod.allocator_hint(dict(stuck, torch_reserved=3 * GIB + GIB // 2)) == ""
    assert budget_mod.allocator_hint(dict(stuck, torch_allocator="cudaMallocAsync")) == ""
    ns = streamed(pack)
    m = ns.apply_streamed(FakePatcher(), {"min_tokens": 0}, h3=make_fake_h3())
    run = m.model_options["transformer_options"]["patches_replace"]["dit"][("double_block", 0)].run
    run.last_budget = dict(stuck, free=GIB, comfy_offloadable=0, reserve=0, held=0,
                           margin=GIB // 2, budget=GIB // 2, torch_cache_released=0,
                           comfy_cast_buffers=0)
    x = types.SimpleNamespace(shape=(216476, 5120), device="cuda:0")
    msg = run.refusal(0, x, "vram_budget 0.50 GiB cannot hold this block call")
    assert "native allocator keeps 6.00 GiB" in msg and "kv_store kvi8s" in msg
