// cuDNN's convolutions as a way to run a window product (private to src/backends/cuda).
//
// A WindowMatMul whose image is read as a 2-D convolution reads its windows (rows over
// images and output pixels, the sum over channels and kernel positions, the weight one
// packed row per output channel) can be run by cuDNN's implicit-GEMM kernels, which
// WindowProducts' search weighs against luminal's own. The library is opened when first
// needed, not linked: a program runs without it (the toolkit's copy, or PyTorch's
// nvidia-cudnn wheel on LD_LIBRARY_PATH or already loaded by torch), and
// LUMINAL_CUDNN=off leaves it out.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/cuda/device.hpp"
#include "luminal/dtype.hpp"
#include "luminal/view.hpp"

namespace luminal::cudagen {

/// A 2-D cross-correlation without padding, as cuDNN describes one: x [n, c, h, w] and
/// y [n, k, p, q] at any strides, the filter [k, c, r, s] packed, channels innermost
/// (KRSC) or outermost (KCRS).
struct Convolution2d {
  std::array<int, 4> x_dims{}, x_strides{};  // n, c, h, w
  std::array<int, 4> filter{};               // k, c, r, s
  bool filter_channels_last = false;
  std::array<int, 4> y_dims{}, y_strides{};  // n, k, p, q
  std::array<int, 2> stride{}, dilation{};   // along h, w
  std::string describe() const;
};

/// The convolution that computes WindowProducts::run's product over `a` and `b` (their
/// views as it takes them, `row_dims` and `transposed` as it does): each element of x it
/// reads lies where `a` reads it, and y where the product's output goes. nullopt where
/// none does: a weight not packed along the sum or varying along a batch dim, more than
/// one dim of images or two of pixels, a sum not ordered as one of the filter layouts.
std::optional<Convolution2d> convolution_of(const ConcreteView& a, const ConcreteView& b,
                                            size_t row_dims, bool transposed);

class CudnnConvolutions {
 public:
  explicit CudnnConvolutions(const Device& device);
  ~CudnnConvolutions();
  CudnnConvolutions(const CudnnConvolutions&) = delete;
  CudnnConvolutions& operator=(const CudnnConvolutions&) = delete;

  /// cuDNN's implicit-GEMM algorithms for `c` over f16 or bf16 (f32 accumulation), best
  /// first by its heuristics, at most `count`; empty where cuDNN is not found (or turned
  /// off) or cannot run `c`. (Winograd and FFT are left out: they round differently from
  /// a sum of products, and every way of a product must give its answers.)
  std::vector<int> algorithms(const Convolution2d& c, DType t, size_t count);
  /// "implicit precomp gemm" for CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM.
  static std::string algorithm_name(int algorithm);
  /// y = the convolution of x by filter w, by `algorithm` (one algorithms() gave).
  void run(const Convolution2d& c, DType t, int algorithm, const void* x, const void* w, void* y);

 private:
  struct Plan;  // one convolution's descriptors
  Plan* plan(const Convolution2d& c, DType t);
  const Device& device_;
  void* handle_ = nullptr;  // cudnnHandle_t, made on first use
  std::map<std::string, std::unique_ptr<Plan>> plans_;
  DeviceBuffer workspace_;  // grown to the largest an algorithm run asked for
};

}  // namespace luminal::cudagen
