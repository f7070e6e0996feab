// reference_cache.h: float64 references shared between processes, in files of a folder.
//
// The GPU tests check every kernel of a ladder on the same inputs: the ragged shapes of
// AttentionFwdKernels.RaggedShapesCausalAndNot, for instance, draw the same seeds for every one of
// chapter 05's rungs, chapter 07's and chapter 08's, so each of them needs the same float64
// references. ctest runs each test in a process of its own, where LastReference (last_reference.h)
// cannot help: on an H200 with 16 tests at once (2026-12-01) these references were most of the
// README's second command, a 05 rung's ragged test alone 30-38 s of it, one CPU core each
// (notes/measured/h200-2026-12-01/workflow_command2.log.gz). A test program that calls
// share_references_in(folder) keeps every attention reference it computes in that folder, and the
// next process that needs it reads it back instead.
//
// The file of a reference is named by a 128-bit hash of everything LastReference compares (the
// scalars and every input byte) and holds the scalars again, which are compared on reading: a
// reference is read back only for inputs with the same hash. While one process computes a
// reference, the others that need it wait for its file (a lock, released when the process ends,
// however it ends) and then read it, rather than computing it again beside it. A file is written
// under a temporary name and renamed, so a reader never sees half of one. The tests' folder is
// emptied at the start and removed at the end of a ctest run (tests/CMakeLists.txt); the chapter
// programs share nothing.
#pragma once
#include <string>
#include <vector>

namespace fa {

// Every later attention reference of this process goes through files in `folder` (created if
// missing); "" turns sharing off (the default).
void share_references_in(const std::string& folder);
const std::string& shared_references_folder();

// The file of one reference, locked from construction to destruction.
class SharedReferenceFile {
 public:
  // The key is LastReference's (RefInputs): the scalars as text and the input tensors.
  SharedReferenceFile(const std::string& folder, const std::string& scalars,
                      const std::vector<std::vector<float>>& inputs);
  ~SharedReferenceFile();
  SharedReferenceFile(const SharedReferenceFile&) = delete;
  SharedReferenceFile& operator=(const SharedReferenceFile&) = delete;

  // The stored fields (each as its bytes), or false when there is no readable file for this key.
  bool load(std::vector<std::string>& fields) const;
  // Stores the fields; a failure (a full disk) only means that the next process computes again.
  void store(const std::vector<std::string>& fields) const;

 private:
  std::string path_, scalars_;
  int lock_fd_ = -1;
};

}  // namespace fa
