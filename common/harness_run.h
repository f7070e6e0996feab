// harness_run.h: the steps every runner (harness_*.cpp) takes, whatever the problem: is there a
// GPU that can take this kernel, turn a kernel's error into the row's status, fail the row on a
// failed check, and make a seeded input. Internal to the harness; callers use harness.h.
#pragma once
#include <cstdint>
#include <vector>

#include "buffer.h"
#include "check.h"
#include "dtype.h"
#include "harness.h"

namespace fa::harness_detail {

// Common start of every run: is there a GPU that can take this kernel?
bool gpu_ready(RunResult& r, int min_sm);

// In a student release, a kernel whose exercise file is still as handed out fails without being
// launched: its TODO blocks are cut out, and what is left may hang or fault the GPU (a ring whose
// waits are missing exits with copies in flight), which would end every later run of the
// process. Sets the row's status and message and returns false in that case.
bool exercise_written(RunResult& r);

// Run `body`; an fa::Unsupported from the kernel becomes an UNSUPPORTED row with its message.
// body is the launch: it runs only once the shape is accepted, and never for an untouched exercise.
template <class F>
void guarded(RunResult& r, F body) {
  if (!exercise_written(r)) return;
  try {
    body();
  } catch (const Error& e) {
    // fa::Unsupported becomes UNSUPPORTED; any other error (a CUDA error) is a failed run,
    // reported with its file and line, except one that gets a hint and counts as UNSUPPORTED:
    // the binary holds no code for this GPU (built for another architecture).
    bool unsupported = false;
    r.message = kernel_error_message(e, &unsupported);
    r.status = unsupported ? Status::Unsupported : Status::Fail;
  }
}

// Any failed check fails the row.
void finish_checks(RunResult& r);

// n seeded normal values (stream: which tensor of the run), rounded to t.
std::vector<float> draw(int64_t n, uint64_t seed, uint64_t stream, const RunOptions& opt, DType t);

// An input tensor on the device. Checked runs draw it on the host (the reference needs the
// values); timing-only runs fill it on the GPU, which is much faster at benchmark sizes.
DeviceBuffer make_input(DType t, int64_t n, uint64_t stream, const RunOptions& opt,
                        std::vector<float>* host, bool need_host = false);

}  // namespace fa::harness_detail
