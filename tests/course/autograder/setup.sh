#!/usr/bin/env bash
# Gradescope runs this once, when it builds the autograder's image (README.md, this folder): it
# installs what the build needs and builds the instructor's tree with the untouched exercises in
# place, so that grading a submission rebuilds only the files it changes. Any Ubuntu 22.04 or
# 24.04 machine with sudo can run it too (a course's own GPU machines: README.md, "The GPU half").
#   FA_CUDA_PACKAGE   the CUDA Toolkit package when nvcc is missing (default cuda-toolkit-12-6)
#   FA_AUTOGRADER_SOURCE, FA_AUTOGRADER_BUILD   the tree and the grading build (autograde.py)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ -f "$here/tests/course/autograder/autograde.py" ]; then
  grader="$here/tests/course/autograder/autograde.py"
else
  grader="$here/autograde.py"
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq cmake ninja-build g++ ccache python3 libeigen3-dev libgtest-dev \
  libbenchmark-dev wget ca-certificates
if [ -d /usr/local/cuda/bin ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
if ! command -v nvcc >/dev/null 2>&1; then
  # NVIDIA's repository for this Ubuntu release (https://developer.nvidia.com/cuda-downloads).
  . /etc/os-release
  repo="ubuntu${VERSION_ID//./}"
  wget -q "https://developer.download.nvidia.com/compute/cuda/repos/${repo}/x86_64/cuda-keyring_1.1-1_all.deb" \
    -O /tmp/cuda-keyring.deb
  $sudo dpkg -i /tmp/cuda-keyring.deb
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq "${FA_CUDA_PACKAGE:-cuda-toolkit-12-6}"
  export PATH="/usr/local/cuda/bin:$PATH"
fi
# Gradescope's machines have no GPU: build for the architecture the course grades on elsewhere
# (FA_CUDA_ARCH, default 90: the same objects a GPU machine of that kind would build).
python3 "$grader" --prepare --cmake-arg="-DCMAKE_CUDA_ARCHITECTURES=${FA_CUDA_ARCH:-90}"
