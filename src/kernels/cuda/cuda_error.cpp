#include "kernels/cuda/cuda_error.h"

#include "common/error.h"

namespace splash::kernels::cuda {

void cuda_fail(const std::string& message) { throw Error(message); }

}  // namespace splash::kernels::cuda
