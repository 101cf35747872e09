// exp_ftz(z): Eigen's vectorised exp with results below the normal range flushed to exactly 0,
// for the softmax-family kernels (softmax, attention, cross-entropy), where a -inf mask must give
// a probability of exactly 0.
//
// Why: Eigen 3.4's packet exp for double clamps its argument to [-709.78, 709.78] before the
// polynomial, so exp(-inf) (and anything below -709.78) comes out as 2^-1024 = 5.6e-309 instead of
// 0; a masked key or class then leaks a tiny probability and a tiny gradient. Rows shorter than a
// packet go through the scalar std::exp and were exact, so the leak depended on the row width.
// Here every z < log(smallest normal) (about -708.4 in f64, -87.3 in f32; -inf included) gives 0
// on both the packet and the scalar path, so the result no longer depends on the row width. The
// cost is one compare and one and-not per packet; the exp stays vectorised.
#pragma once
#include <cmath>
#include <limits>

#include <Eigen/Core>

namespace reel::kernels::cpu {

template <typename T>
struct ExpFtzOp {
  T lowest = std::log(std::numeric_limits<T>::min());  // below it exp(z) is subnormal: give 0

  T operator()(const T& z) const { return z < lowest ? T(0) : std::exp(z); }

  template <typename Packet>
  Packet packetOp(const Packet& z) const {
    namespace ei = Eigen::internal;
    return ei::pandnot(ei::pexp(z), ei::pcmp_lt(z, ei::pset1<Packet>(lowest)));
  }
};

// exp of an Eigen array expression, flushed to 0 below the normal range (see above). Needs
// Eigen 3.4 (pcmp_lt / HasCmp for every packet type), which both the system and .deps/ provide.
template <typename Derived>
auto exp_ftz(const Eigen::ArrayBase<Derived>& z) {
  return z.unaryExpr(ExpFtzOp<typename Derived::Scalar>());
}

}  // namespace reel::kernels::cpu

namespace Eigen::internal {
template <typename T>
struct functor_traits<reel::kernels::cpu::ExpFtzOp<T>> {
  enum {
    Cost = functor_traits<scalar_exp_op<T>>::Cost + 2 * NumTraits<T>::AddCost,
    PacketAccess = packet_traits<T>::HasExp && packet_traits<T>::HasCmp
  };
};
}  // namespace Eigen::internal
