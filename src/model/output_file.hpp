// Where a command writes its output file, and writing it so that nothing is
// lost: the path is checked before any work (a run must not compute for
// minutes and then find it cannot write, or overwrite one of its own inputs),
// and the bytes go to a temporary file beside the target that replaces it
// only when complete (removed on an error, Ctrl-C or SIGTERM).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace h3s {

// The file `path` names, checked for writing: a symlink is followed (the
// target is written, the link kept); an existing target must be a regular
// file (not a directory, device or FIFO) and not the same file as any of
// `inputs` (paths the command reads; empty ones are skipped); its directory
// must exist and be writable. Error(invalid_argument) naming `flag`, the path
// and the reason otherwise. Returns the path to write.
std::string checked_output_path(const std::string& path, const std::string& flag,
                                const std::vector<std::string>& inputs = {});

// Runs write(tmp) with tmp a fresh temporary path in `path`'s directory, then
// renames tmp to `path`. tmp is removed if write throws or returns false, if
// the rename fails, and on SIGINT / SIGTERM while writing (the signal's
// default action then runs). Error(bad_input) naming `path` and the system's
// reason when the write or the rename fails.
void write_file_atomically(const std::string& path,
                           const std::function<bool(const std::string&)>& write);

}  // namespace h3s
