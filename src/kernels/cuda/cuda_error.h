#pragma once
// How .cu files report errors: nvcc's front end cannot compile fmt (and with it
// splash::fail), so CUDA sources build their message as a string and this throws it as
// splash::Error from plain C++.
#include <string>

namespace splash::kernels::cuda {

[[noreturn]] void cuda_fail(const std::string& message);

}  // namespace splash::kernels::cuda
