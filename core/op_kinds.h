// op_kinds.h — the kinds of elementwise, reduction and random kernels (internal).
//
// Each backend turns a run-time kind into a compile-time one with the
// dispatch_* helpers here, then instantiates its loop (a CPU loop, a CUDA
// kernel) over math::apply_unary<Op> / math::apply_binary<Op> from
// kernel_math.h: one definition of the math, every backend.
#pragma once

#include <cstdint>

namespace ringgrad {

#define RG_UNARY_OPS(X)                                                                            \
  X(Neg)                                                                                           \
  X(Exp) X(Log) X(Sqrt) X(Rsqrt) X(Tanh) X(Sigmoid) X(Relu) X(GeluErf) X(GeluTanh) X(Abs) X(Clamp) \
      X(PowScalar)

// Arithmetic, comparisons (which produce bool), and fused backward kernels
// (grad, saved) -> grad_input:
//   ReluBackward (g, y): g·[y > 0]        GeluErfBackward (g, x): g·gelu'(x)
//   GeluTanhBackward (g, x): g·gelu_tanh'(x)   SigmoidBackward (g, y): g·y·(1-y)
//   TanhBackward (g, y): g·(1-y²)          AbsBackward (g, x): g·sign(x)
#define RG_BINARY_OPS(X)                                                                        \
  X(Add)                                                                                        \
  X(Sub) X(Mul) X(Div) X(Pow) X(Maximum) X(Minimum) X(Eq) X(Ne) X(Lt) X(Le) X(Gt) X(Ge)         \
      X(ReluBackward) X(GeluErfBackward) X(GeluTanhBackward) X(SigmoidBackward) X(TanhBackward) \
          X(AbsBackward)

#define RG_ENUM_ITEM(name) name,
enum class UnaryOp { RG_UNARY_OPS(RG_ENUM_ITEM) };
enum class BinaryOp { RG_BINARY_OPS(RG_ENUM_ITEM) };
#undef RG_ENUM_ITEM

enum class ReduceOp { Sum, Max, Min, LogSumExp, ArgMax, ArgMin };
enum class RandomDist { Uniform, Normal, Integer };

constexpr bool is_comparison(BinaryOp op) {
  return op == BinaryOp::Eq || op == BinaryOp::Ne || op == BinaryOp::Lt || op == BinaryOp::Le ||
         op == BinaryOp::Gt || op == BinaryOp::Ge;
}
// Ops defined for int64 as well as floats (the rest need floats).
constexpr bool works_on_integers(UnaryOp op) {
  return op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Clamp;
}
constexpr bool works_on_integers(BinaryOp op) {
  return op == BinaryOp::Add || op == BinaryOp::Sub || op == BinaryOp::Mul ||
         op == BinaryOp::Maximum || op == BinaryOp::Minimum || is_comparison(op);
}

// f.template operator()<Op>() for the run-time op.
template <typename F>
void dispatch_unary(UnaryOp op, F&& f) {
#define RG_CASE(name)                       \
  case UnaryOp::name:                       \
    f.template operator()<UnaryOp::name>(); \
    return;
  switch (op) { RG_UNARY_OPS(RG_CASE) }
#undef RG_CASE
}

template <typename F>
void dispatch_binary(BinaryOp op, F&& f) {
#define RG_CASE(name)                        \
  case BinaryOp::name:                       \
    f.template operator()<BinaryOp::name>(); \
    return;
  switch (op) { RG_BINARY_OPS(RG_CASE) }
#undef RG_CASE
}

}  // namespace ringgrad
