// elementwise.cu — CUDA fill, copy, unary, binary, where, arange and random.
//
// One grid-stride kernel shape for all of them: thread i handles element i of
// the output's row-major order and finds each operand's element through its
// strides (StridedView::offset; a contiguous view skips the arithmetic). The
// math is kernel_math.h's, the same the CPU loops run.
#include "ringgrad/core/cuda/cuda_backend.h"

namespace ringgrad::cuda {
namespace {

template <typename T>
__global__ void fill_kernel(StridedView out, int64_t n, T value) {
  RG_GRID_LOOP(i, n) out.at<T>(i) = value;
}

template <typename S, typename D>
__global__ void copy_kernel(StridedView src, StridedView dst, int64_t n) {
  RG_GRID_LOOP(i, n) dst.at<D>(i) = convert_element<D>(src.at<S>(i));
}

template <UnaryOp Op, typename T>
__global__ void unary_kernel(StridedView in, StridedView out, int64_t n, T p0, T p1) {
  RG_GRID_LOOP(i, n) out.at<T>(i) = math::apply_unary<Op>(in.at<T>(i), p0, p1);
}

template <BinaryOp Op, typename T, typename Out>
__global__ void binary_kernel(StridedView a, StridedView b, StridedView out, int64_t n) {
  RG_GRID_LOOP(i, n) out.at<Out>(i) = math::apply_binary<Op>(a.at<T>(i), b.at<T>(i));
}

// 16-bit operands (S = BFloat16 or Float16): loaded as float, the float32 math, one rounding.
template <UnaryOp Op, typename S>
__global__ void reduced_unary_kernel(StridedView in, StridedView out, int64_t n, float p0,
                                     float p1) {
  RG_GRID_LOOP(i, n) out.at<S>(i) = S(math::apply_unary<Op>(float(in.at<S>(i)), p0, p1));
}

template <BinaryOp Op, typename S, typename Out>
__global__ void reduced_binary_kernel(StridedView a, StridedView b, StridedView out, int64_t n) {
  RG_GRID_LOOP(i, n)
  out.at<Out>(i) = static_cast<Out>(math::apply_binary<Op>(float(a.at<S>(i)), float(b.at<S>(i))));
}

template <typename T>
__global__ void where_kernel(StridedView cond, StridedView a, StridedView b, StridedView out,
                             int64_t n) {
  RG_GRID_LOOP(i, n) out.at<T>(i) = cond.at<bool>(i) ? a.at<T>(i) : b.at<T>(i);
}

template <typename T>
__global__ void arange_kernel(T* out, int64_t n, double start, double step) {
  RG_GRID_LOOP(i, n) out[i] = static_cast<T>(start + step * static_cast<double>(i));
}

// Element i uses Philox counter offset + i, exactly as the CPU does: one seed,
// the same numbers on every device.
template <typename T>
__global__ void random_kernel(T* out, int64_t n, RandomDist dist, uint64_t seed, uint64_t offset,
                              double p0, double p1) {
  RG_GRID_LOOP(i, n) {
    if (dist == RandomDist::Uniform)
      out[i] = T(p0) + (T(p1) - T(p0)) * math::philox_uniform<T>(seed, offset + i);
    else
      out[i] = T(p0) + T(p1) * math::philox_normal<T>(seed, offset + i);
  }
}

__global__ void randint_kernel(int64_t* out, int64_t n, uint64_t seed, uint64_t offset, int64_t low,
                               uint64_t range) {
  RG_GRID_LOOP(i, n)
  out[i] = low + static_cast<int64_t>(math::philox_bits64(seed, offset + i) % range);
}

}  // namespace

void CudaBackend::fill(const TensorRef& out, double value) {
  int64_t n = out.numel();
  if (n == 0) return;
  dispatch_storage(out.dtype, [&]<typename T>() {
    fill_kernel<T>
        <<<blocks_for(n), kBlock, 0, compute_stream()>>>(view(out), n, convert_element<T>(value));
  });
  RG_CUDA_CHECK_LAUNCH();
}

void CudaBackend::copy(const TensorRef& src, const TensorRef& dst) {
  int64_t n = dst.numel();
  if (n == 0) return;
  dispatch_storage(src.dtype, [&]<typename S>() {
    dispatch_storage(dst.dtype, [&]<typename D>() {
      copy_kernel<S, D><<<blocks_for(n), kBlock, 0, compute_stream()>>>(view(src), view(dst), n);
    });
  });
  RG_CUDA_CHECK_LAUNCH();
}

void CudaBackend::unary(UnaryOp op, const TensorRef& in, const TensorRef& out, double p0,
                        double p1) {
  int64_t n = out.numel();
  if (n == 0) return;
  if (is_reduced_precision(in.dtype)) {
    dispatch_unary(op, [&]<UnaryOp Op>() {
      dispatch_reduced(in.dtype, "unary", [&]<typename S>() {
        reduced_unary_kernel<Op, S><<<blocks_for(n), kBlock, 0, compute_stream()>>>(
            view(in), view(out), n, static_cast<float>(p0), static_cast<float>(p1));
      });
    });
    RG_CUDA_CHECK_LAUNCH();
    return;
  }
  dispatch_unary(op, [&]<UnaryOp Op>() {
    auto run = [&]<typename T>() {
      unary_kernel<Op, T><<<blocks_for(n), kBlock, 0, compute_stream()>>>(
          view(in), view(out), n, static_cast<T>(p0), static_cast<T>(p1));
    };
    dispatch_for_op<Op>(in.dtype, "unary", run);
  });
  RG_CUDA_CHECK_LAUNCH();
}

void CudaBackend::binary(BinaryOp op, const TensorRef& a, const TensorRef& b,
                         const TensorRef& out) {
  int64_t n = out.numel();
  if (n == 0) return;
  if (is_reduced_precision(a.dtype)) {
    dispatch_binary(op, [&]<BinaryOp Op>() {
      dispatch_reduced(a.dtype, "binary", [&]<typename S>() {
        using R = decltype(math::apply_binary<Op>(0.0f, 0.0f));  // bool for comparisons
        using Out = std::conditional_t<std::is_same_v<R, bool>, bool, S>;
        reduced_binary_kernel<Op, S, Out>
            <<<blocks_for(n), kBlock, 0, compute_stream()>>>(view(a), view(b), view(out), n);
      });
    });
    RG_CUDA_CHECK_LAUNCH();
    return;
  }
  dispatch_binary(op, [&]<BinaryOp Op>() {
    auto run = [&]<typename T>() {
      using Out = decltype(math::apply_binary<Op>(T(), T()));
      binary_kernel<Op, T, Out>
          <<<blocks_for(n), kBlock, 0, compute_stream()>>>(view(a), view(b), view(out), n);
    };
    dispatch_for_op<Op>(a.dtype, "binary", run);
  });
  RG_CUDA_CHECK_LAUNCH();
}

void CudaBackend::where(const TensorRef& cond, const TensorRef& a, const TensorRef& b,
                        const TensorRef& out) {
  int64_t n = out.numel();
  if (n == 0) return;
  dispatch_storage(out.dtype, [&]<typename T>() {
    where_kernel<T><<<blocks_for(n), kBlock, 0, compute_stream()>>>(view(cond), view(a), view(b),
                                                                    view(out), n);
  });
  RG_CUDA_CHECK_LAUNCH();
}

void CudaBackend::arange(const TensorRef& out, double start, double step) {
  int64_t n = out.numel();
  if (n == 0) return;
  dispatch_numeric(out.dtype, "arange", [&]<typename T>() {
    arange_kernel<T>
        <<<blocks_for(n), kBlock, 0, compute_stream()>>>(static_cast<T*>(out.data), n, start, step);
  });
  RG_CUDA_CHECK_LAUNCH();
}

void CudaBackend::random(const TensorRef& out, RandomDist dist, uint64_t seed, uint64_t offset,
                         double p0, double p1) {
  int64_t n = out.numel();
  if (n == 0) return;
  if (dist == RandomDist::Integer) {
    randint_kernel<<<blocks_for(n), kBlock, 0, compute_stream()>>>(
        static_cast<int64_t*>(out.data), n, seed, offset, static_cast<int64_t>(p0),
        static_cast<uint64_t>(static_cast<int64_t>(p1) - static_cast<int64_t>(p0)));
  } else {
    dispatch_floating(out.dtype, "random", [&]<typename T>() {
      random_kernel<T><<<blocks_for(n), kBlock, 0, compute_stream()>>>(static_cast<T*>(out.data), n,
                                                                       dist, seed, offset, p0, p1);
    });
  }
  RG_CUDA_CHECK_LAUNCH();
}

}  // namespace ringgrad::cuda
