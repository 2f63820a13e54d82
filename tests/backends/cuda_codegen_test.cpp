// The CUDA backend's code generation, which needs no GPU: what kernels it makes of a
// graph, and that NVRTC compiles them for Hopper. Runs on CI.
#include <gtest/gtest.h>

#ifdef LUMINAL_HAS_CUDA
#include <algorithm>
#include <future>
#include <limits>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include "backends/cuda/arena.hpp"
#include "backends/cuda/attention.hpp"
#include "backends/cuda/attention_grad.hpp"
#include "backends/cuda/attention_mma.hpp"
#include "backends/cuda/attention_stream.hpp"
#include "backends/cuda/attention_wgmma.hpp"
#include "backends/cuda/codegen.hpp"
#include "backends/cuda/compile.hpp"
#include "backends/cuda/copy_view.hpp"
#include "backends/cuda/cudnn_convolutions.hpp"
#include "backends/cuda/device_trials.hpp"
#include "backends/cuda/expert_products.hpp"
#include "backends/cuda/gemv.hpp"
#include "backends/cuda/nvrtc.hpp"
#include "backends/cuda/peer_all_reduce.hpp"
#include "backends/cuda/quant_products.hpp"
#include "backends/cuda/top_k.hpp"
#include "backends/cuda/window_products.hpp"
#include "luminal/luminal.hpp"
#include "luminal/models/llama.hpp"
#include "luminal/nn/attention.hpp"
#include "luminal/reference.hpp"
#include "runtime/program.hpp"
#include "testing/attention_gradient_cases.hpp"
#include "testing/expect_error.hpp"
#include "testing/map_groups.hpp"
#include "testing/matmul_layouts.hpp"
#include "testing/nvrtc_only.hpp"
#include "testing/quant_blocks.hpp"
#include "testing/reductions_across_rows.hpp"
#include "testing/row_ops.hpp"
#include "testing/scoped_env.hpp"

namespace luminal {
namespace {

using cudagen::KernelShape;

// The launches the CUDA backend would make for `y`'s graph.
std::vector<KernelShape> launches(const Graph& cx) {
  const runtime::PlannedProgram p =
      runtime::optimize_and_plan(cx, compiler::Fusion::RecomputeShared);
  const cudagen::CudaSource src = cudagen::generate_cuda_source(*p.program.graph, p.plan);
  std::vector<KernelShape> out;
  for (const cudagen::KernelLaunch& l : src.launches)
    if (l.shape != KernelShape::InGroup) out.push_back(l.shape);
  return out;
}

// Softmax, RMSNorm and LayerNorm are each one kernel, a block per row: the reductions'
// results stay in registers and the row is read from cache after the first pass.
TEST(CudaCodegen, RowOpsAreOneKernel) {
  for (const auto& op : std::vector<std::function<Tensor(Tensor)>>{
           [](Tensor x) { return x.softmax(1); },
           [](Tensor x) { return x.rms_norm({1}) * 0.5; },
           [](Tensor x) { return x.layer_norm({1}); },
       }) {
    Graph cx;
    Tensor x = cx.named_tensor("x", {Expr::var("rows"), 1024});
    op(x).retrieve();
    EXPECT_EQ(launches(cx), std::vector<KernelShape>{KernelShape::Rows});
  }
}

// A pooling window's reduction (3 elements a row) takes a thread a row, its elements in a
// loop, where a longer row takes a warp.
TEST(CudaCodegen, ShortRowsAreReducedByOneThreadEach) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {Expr::var("n"), 8, 16, 16}, DType::BF16);
  max_pool2d(x, PoolOptions{3, 2, 1}).retrieve();
  cx.named_tensor("y", {Expr::var("n"), 100}, DType::BF16).sum({1}).retrieve();
  const cudagen::CompiledProgram p = cudagen::compile_program(cx, "sm_90", true);
  EXPECT_NE(p.source.code.find("for (int64_t lum_r = 0; lum_r < 3; ++lum_r)"), std::string::npos);
  EXPECT_NE(p.source.code.find("lum_r = threadIdx.x & 31"), std::string::npos)
      << "a row of 100 is a warp's";
}

// A padded read of a stored value of fixed size loads without a branch (from element 0
// where it falls in the padding, then zeroed), so a thread's reads are in flight
// together: an im2col copy's columns (an f32 convolution's: a half-precision one reads
// its windows in place). Under a symbolic size the buffer may be empty, and the read
// stays behind its branch.
TEST(CudaCodegen, PaddedReadsOfStoredValuesLoadWithoutABranch) {
  for (const bool fixed : {true, false}) {
    Graph cx;
    Tensor x = cx.named_tensor("x", {8, fixed ? Expr(64) : Expr::var("n"), 56, 56});
    Tensor w = cx.named_tensor("w", {64, fixed ? Expr(64) : Expr::var("n"), 3, 3});
    ConvOptions o;
    o.padding = 1;
    conv2d(x, w, {}, o).retrieve();
    const cudagen::CompiledProgram p = cudagen::compile_program(cx, "sm_90", true);
    const std::string& code = p.source.code;
    const bool branch_free = std::regex_search(code, std::regex(R"(in1\[t\d+ \? \()"));
    const bool guarded = std::regex_search(code, std::regex(R"(if \(lum_i\d+ \+ lum_i\d+ [<>])"));
    EXPECT_EQ(branch_free, fixed) << code;
    EXPECT_EQ(guarded, !fixed) << code;
  }
}

// Max pooling pads with -inf (a select over the image, one per padded dim) and reads its
// windows through that: inside each padding guard the window's position is known to lie
// within the padding's bounds, so the image is read at plain offsets, with no division
// to take the position back through the selects' shapes.
TEST(CudaCodegen, PoolingWindowsReadTheImageWithoutDivisions) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {2, 8, 12, 12}, DType::BF16);
  max_pool2d(x, {.kernel = 3, .stride = 2, .padding = 1}).retrieve();
  const cudagen::CompiledProgram p = cudagen::compile_program(cx, "sm_90", true);
  std::istringstream code(p.source.code);
  size_t reads = 0;
  for (std::string line; std::getline(code, line);) {
    if (line.find("in1[") == std::string::npos) continue;
    ++reads;
    EXPECT_EQ(line.find_first_of("/%"), std::string::npos) << line;
  }
  EXPECT_GT(reads, 0u) << p.source.code;
}

// A later reduction that reads an earlier one's result at another row cannot share its
// block: the two stay separate kernels.
TEST(CudaCodegen, ARowGroupNeverReadsAnotherRowsResult) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {8, 64});
  Tensor m = x.max({1}, true);
  (x - m.flip(0)).exp().sum({1}).retrieve();  // row i reads the max of row 7 - i
  const std::vector<KernelShape> got = launches(cx);
  EXPECT_EQ(std::count(got.begin(), got.end(), KernelShape::Rows), 0) << got.size();
  EXPECT_EQ(got.size(), 2u);
}

// The CUDA source the backend generates for cx's plan.
cudagen::CudaSource planned_source(Graph& cx) {
  const runtime::PlannedProgram p =
      runtime::optimize_and_plan(cx, compiler::Fusion::RecomputeShared);
  return cudagen::generate_cuda_source(*p.program.graph, p.plan);
}

// A row group takes 16 bytes of adjacent elements a thread where its cached row is a
// whole number of them (bf16 rows of 1024: 8 a thread, so 128 threads keep a row busy),
// and one element a thread where it is not (rows of 1001) or is not cached (rows of
// 40000 f32 exceed the row cache).
TEST(CudaCodegen, RowGroupsTakeAdjacentElementsWhereTheRowAllows) {
  for (const auto& [len, t, busy] :
       std::vector<std::tuple<int64_t, DType, int64_t>>{{1024, DType::BF16, 128},
                                                        {1024, DType::F32, 256},
                                                        {1001, DType::BF16, 1001},
                                                        {40000, DType::F32, 40000}}) {
    Graph cx;
    Tensor x = cx.named_tensor("x", {Expr::var("rows"), len}, t);
    x.layer_norm({1}).retrieve();
    const cudagen::CudaSource src = planned_source(cx);
    const auto rows = std::find_if(src.launches.begin(), src.launches.end(),
                                   [](const auto& l) { return l.shape == KernelShape::Rows; });
    ASSERT_NE(rows, src.launches.end()) << len;
    EXPECT_EQ(rows->row_threads.eval(), busy) << len << " " << dtype_name(t);
  }
}

// Where a thread takes a few pieces of a contiguous row, a LayerNorm's row stays in its
// registers (no shared memory, no barrier but the reductions' two each) and its weight
// and bias are loaded once a block, as whole vectors, where they fit too (not beside six
// pieces of f32 a thread); a row of 10000 f32 goes through shared memory instead.
TEST(CudaCodegen, RowGroupsHoldTheirRowsInRegisters) {
  for (const auto& [len, t, row_held, weights_held] :
       std::vector<std::tuple<int64_t, DType, bool, bool>>{{1024, DType::BF16, true, true},
                                                           {6000, DType::F32, true, false},
                                                           {10000, DType::F32, false, false}}) {
    Graph cx;
    Tensor x = cx.named_tensor("x", {Expr::var("rows"), len}, t);
    auto along = [&](const char* name) {
      return cx.named_tensor(name, {len}, t).reshape({1, len}).broadcast_to(x.shape());
    };
    (x.layer_norm({1}) * along("w") + along("b")).retrieve();
    const cudagen::CudaSource src = planned_source(cx);
    const auto rows = std::find_if(src.launches.begin(), src.launches.end(),
                                   [](const auto& l) { return l.shape == KernelShape::Rows; });
    ASSERT_NE(rows, src.launches.end()) << len;
    const std::string& code = src.code;
    const auto count = [&](const std::string& s) {
      size_t n = 0;
      for (size_t at = code.find(s); at != std::string::npos; at = code.find(s, at + 1)) ++n;
      return n;
    };
    EXPECT_EQ(rows->shared_bytes == 0, row_held) << len;
    EXPECT_EQ(count("__syncthreads()") == 4, row_held) << len;
    EXPECT_EQ(count("lum_wv") > 0, weights_held) << len;
    if (weights_held) {
      EXPECT_EQ(count("lum_load_vec<"), 3u) << len << ": the row, weight, bias";
    }
  }
}

// A kernel that stores half precision fuses its f32 products into the sums after them
// (erf's polynomial in a bf16 GELU: one fmaf a step) and takes the hardware's reciprocal
// and exponential; one that stores f32 rounds each step as the reference does.
TEST(CudaCodegen, HalfPrecisionKernelsTakeLooseF32Steps) {
  for (DType t : {DType::BF16, DType::F32}) {
    Graph cx;
    cx.named_tensor("x", {Expr::var("rows"), 4096}, t).gelu().retrieve();
    const std::string source = planned_source(cx).code;
    const std::string code = source.substr(source.find("__global__"));  // (past the prelude)
    const bool half = t == DType::BF16;
    for (const char* step : {"fmaf(", "lum_approx_recipf(", "lum_approx_exp2f("})
      EXPECT_EQ(code.find(step) != std::string::npos, half) << dtype_name(t) << " " << step;
    EXPECT_EQ(code.find("lum_recipf(") != std::string::npos, !half) << dtype_name(t);
  }
}

// A sum across rows takes a lane an output, adjacent lanes adjacent outputs; a sum along
// the innermost axis (or one that steps one element) a warp an output.
TEST(CudaCodegen, ReductionsAcrossRowsTakeALaneAnOutput) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {Expr::var("n"), 768});
  x.sum({0}).retrieve();
  EXPECT_NE(cudagen::compile_program(cx, "sm_90", true).source.code.find("lum_cols"),
            std::string::npos);
  Graph rows;
  Tensor y = rows.named_tensor("y", {Expr::var("n"), 768});
  y.sum({1}).retrieve();
  y.transpose(0, 1).sum({1}).retrieve();  // the reduced axis steps one element
  EXPECT_EQ(cudagen::compile_program(rows, "sm_90", true).source.code.find("lum_cols"),
            std::string::npos);
  testing::expect_reductions_across_rows_match_reference(testing::NvrtcOnly());
}

TEST(CudaCodegen, RowOpsCompileForHopper) {
  testing::expect_row_ops_match_reference(testing::NvrtcOnly());
}

// A row group over at most 16 rows of a known count, each 16384 or more long, spreads each
// row over a cluster of blocks (the function declares its cluster); more rows, shorter
// ones or a row count known only at run time keep a block a row. A reduction alone over at
// most 256 rows of a known count, 16384 or more long or of a length known only at run
// time, deals each row out to many blocks, which meet in scratch memory; over others it
// takes a warp a row. The kernels compile for Hopper (clusters) and Turing (none).
TEST(CudaCodegen, FewLongRowsSpreadOverClusters) {
  struct Case {
    int64_t rows, len;
    bool symbolic_rows, symbolic_len, spread, parted;
  };
  for (const Case& c : std::vector<Case>{{1, 128256, false, false, true, true},
                                         {16, 16384, false, false, true, true},
                                         {17, 16384, false, false, false, true},
                                         {256, 16384, false, false, false, true},
                                         {257, 16384, false, false, false, false},
                                         {1, 8192, false, false, false, false},
                                         {1, 128256, true, false, false, false},
                                         {3, 40000, false, true, false, true}}) {
    const std::string what = std::to_string(c.rows) + " x " + std::to_string(c.len) +
                             (c.symbolic_rows ? ", rows at run time" : "") +
                             (c.symbolic_len ? ", length at run time" : "");
    for (bool alone : {false, true}) {
      Graph cx;
      if (c.symbolic_rows) cx.set_dim("rows", c.rows);
      if (c.symbolic_len) cx.set_dim("len", c.len);
      Tensor x = cx.named_tensor("x", {c.symbolic_rows ? Expr::var("rows") : Expr(c.rows),
                                       c.symbolic_len ? Expr::var("len") : Expr(c.len)});
      (alone ? x.sum({1}) : x.softmax(1)).retrieve();
      const cudagen::CudaSource src = planned_source(cx);
      const auto group = std::find_if(src.launches.begin(), src.launches.end(), [&](const auto& l) {
        return l.shape == (alone ? KernelShape::Reduce : KernelShape::Rows);
      });
      ASSERT_NE(group, src.launches.end()) << what;
      const bool expected = alone ? c.parted : c.spread;
      EXPECT_EQ(alone ? group->parted : group->spread, expected) << what;
      EXPECT_FALSE(alone ? group->spread : group->parted) << what;
      if (alone && c.parted) {
        EXPECT_EQ(group->row_length.eval(cx.dims()), c.len) << what;
      }
      EXPECT_EQ(
          src.code.find(alone ? "lum_scratch" : "LUM_ROW_CLUSTER lum_kernel") != std::string::npos,
          expected)
          << what;
      for (const char* arch : {"sm_90", "sm_75"})
        EXPECT_FALSE(cudagen::compile_cubin(src.code, arch).code.empty()) << arch;
    }
  }
  testing::expect_few_long_rows_match_reference(testing::NvrtcOnly());
}

TEST(CudaCodegen, OneRowProductAndViewCopyKernelsCompileForHopper) {
  EXPECT_FALSE(cudagen::compile_cubin(cudagen::gemv_source({std::begin(cudagen::kGemvShapes),
                                                            std::end(cudagen::kGemvShapes)}),
                                      "sm_90")
                   .code.empty());
  EXPECT_FALSE(cudagen::compile_cubin(cudagen::copy_view_source(), "sm_90").code.empty());
  EXPECT_FALSE(cudagen::compile_cubin(cudagen::top_k_source(), "sm_90").code.empty());
  EXPECT_FALSE(cudagen::compile_cubin(cudagen::expert_products_source(), "sm_90").code.empty());
  EXPECT_FALSE(cudagen::compile_cubin(cudagen::peer_all_reduce_source(), "sm_90").code.empty());
  EXPECT_FALSE(cudagen::compile_cubin(cudagen::window_products_source(), "sm_90").code.empty());
  EXPECT_FALSE(cudagen::compile_cubin(cudagen::comparison_source(), "sm_90").code.empty());
}

// Compiles of one source on several threads give one cubin (the later callers wait for
// the first's compile or read its cache file). Sources compiled in the background are in
// the kernel cache once their tasks are done; a broken one raises nothing there, and its
// error (with NVRTC's log) where it is needed.
TEST(CudaCodegen, KernelsCompileInTheBackgroundIntoTheCache) {
  const testing::ScopedCacheDir cache("background-compiles");
  auto source = [](int i) {
    return "extern \"C\" __global__ void k(float* x) { x[0] = " + std::to_string(i) + ".0f; }\n";
  };
  std::vector<std::future<cudagen::Cubin>> same;
  for (int t = 0; t < 4; ++t)
    same.push_back(
        std::async(std::launch::async, [&] { return cudagen::compile_cubin(source(7), "sm_90"); }));
  std::vector<std::string> codes;
  for (auto& f : same) codes.push_back(f.get().code);
  for (const std::string& code : codes) {
    EXPECT_FALSE(code.empty());
    EXPECT_EQ(code, codes[0]);
  }
  const std::string broken = "extern \"C\" __global__ void k(float* x) { x[0] = ; }\n";
  cudagen::compile_in_background({source(1), source(2), broken}, "sm_90");  // (waited here)
  EXPECT_TRUE(cudagen::compile_cubin(source(1), "sm_90").cache_hit);
  EXPECT_TRUE(cudagen::compile_cubin(source(2), "sm_90").cache_hit);
  testing::expect_error([&] { cudagen::compile_cubin(broken, "sm_90"); },
                        {"NVRTC failed", "source kept at"});
}

// A source of many functions is dealt out to parts that compile on their own, side by
// side: each kernel's function is in the one part its launch names, and each part
// compiles alone.
TEST(CudaCodegen, ManyKernelsAreDealtOutToPartsThatCompileAlone) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {64});
  for (int i = 0; i < 40; ++i)  // (other constants: other functions)
    (x * static_cast<double>(i + 2) + static_cast<double>(i)).sin().retrieve();
  const runtime::PlannedProgram p =
      runtime::optimize_and_plan(cx, compiler::Fusion::RecomputeShared);
  const cudagen::CudaSource src =
      cudagen::generate_cuda_source(*p.program.graph, p.plan, /*map_groups=*/false, 4);
  ASSERT_EQ(src.parts.size(), 4u);  // 40 functions, 8 a part, at most 4 parts
  size_t functions = 0;
  for (const cudagen::KernelLaunch& l : src.launches) {
    if (l.function.empty()) continue;
    ++functions;
    const std::string declared = ") " + l.function + "(";
    EXPECT_NE(src.code.find(declared), std::string::npos) << l.function;
    for (size_t i = 0; i < src.parts.size(); ++i)
      EXPECT_EQ(src.parts[i].find(declared) != std::string::npos, i == l.part) << l.function;
  }
  EXPECT_EQ(functions, 40u);
  for (const std::string& part : src.parts)
    EXPECT_FALSE(cudagen::compile_cubin(part, "sm_90").code.empty());
  // One part where one is asked for.
  EXPECT_EQ(cudagen::generate_cuda_source(*p.program.graph, p.plan, false, 1).parts.size(), 1u);
}

// Every block format the CPU decodes has a GPU decoder, and its kernels compile.
TEST(CudaCodegen, QuantisedProductsCompileForHopperForEveryFormat) {
  for (const GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                           GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    const auto format = static_cast<uint32_t>(t);
    ASSERT_TRUE(cudagen::quant_products_support(format)) << ggml_type_name(format);
    EXPECT_FALSE(
        cudagen::compile_cubin(cudagen::quant_products_source(format), "sm_90").code.empty())
        << ggml_type_name(format);
  }
  EXPECT_FALSE(cudagen::quant_products_support(static_cast<uint32_t>(GgmlType::Q2_K)));
}

// The kernels the CUDA backend (or, not `cuda`, the CPU backend) plans for cx's graph,
// counted by op (a custom op by its name less its format).
std::map<std::string, int> planned_ops(const Graph& cx, bool cuda) {
  const runtime::PlannedProgram p =
      cuda ? cudagen::compile_program(cx, "sm_90", true).planned
           : runtime::optimize_and_plan(cx, compiler::Fusion::StoreShared);
  std::map<std::string, int> count;
  for (const compiler::Kernel& k : p.plan.kernels) {
    const Node& n = p.program.graph->node(k.root);
    ++count[n.op == Op::Custom ? n.custom->name().substr(0, n.custom->name().find('('))
                               : std::string(op_name(n.op))];
  }
  return count;
}

// A Qwen3 layer's query and key norms (RMSNorm over each head's 64 values, rows [kv
// heads, group, seq] and [kv heads, seq]) each run as a row group, the norm's reduction
// and its scaling one launch: the query norm's 3-d rows used to be refused, their two
// flat-index forms not compared equal.
TEST(CudaCodegen, Qwen3HeadNormsAreRowGroups) {
  models::LlamaConfig c;
  c.vocab = 64, c.hidden = 256, c.intermediate = 128, c.layers = 2, c.heads = 4, c.kv_heads = 2;
  c.head_dim = 64, c.qk_norm = true, c.neox_rope = true, c.rope_theta = 1e6;
  Graph cx;
  models::Llama model(cx, c, DType::F16);
  Tensor tokens = cx.named_tensor("tokens", {"seq"}, DType::I32);
  models::Llama::Output out = model.forward(tokens);
  out.logits.retrieve();
  for (auto& kv : out.cache) kv.k.retrieve(), kv.v.retrieve();
  const cudagen::CompiledProgram p = cudagen::compile_program(cx, "sm_90", true);
  int head_norms = 0;
  for (size_t k = 0; k < p.source.launches.size(); ++k) {
    const Node& n = p.planned.program.graph->node(p.planned.plan.kernels[k].root);
    if (n.op != Op::SumReduce || n.shape.size() < 2) continue;
    ++head_norms;
    EXPECT_EQ(p.source.launches[k].shape, cudagen::KernelShape::InGroup)
        << "a head norm's reduction " << to_string(n.shape) << " is launched alone";
  }
  EXPECT_EQ(head_norms, 2 * c.layers);
}

// RMSNorm read by products over the integer kernels' formats becomes part of them
// (NormQMatMul; the norm's own row group is gone) in the CUDA backend's plan, not in the
// CPU's, not over other formats, and not with the rule disabled.
TEST(CudaCodegen, RMSNormFoldsIntoBlockFormatProductsOnTheGpuOnly) {
  auto ops = [](GgmlType type, bool cuda) {
    Graph cx;
    Tensor x = cx.named_tensor("x", {Expr::var("seq"), 512});
    Tensor g = cx.named_tensor("g", {512});
    const Tensor h = x.rms_norm({-1}, 1e-5) * g;
    for (int i = 0; i < 3; ++i) {
      Tensor w = cx.named_tensor("w" + std::to_string(i), {64, 512});
      w.set_quantized(static_cast<uint32_t>(type),
                      testing::random_blocks(static_cast<uint32_t>(type), 64, 512, i));
      h.matmul(w.transpose(0, 1)).retrieve();
    }
    return planned_ops(cx, cuda);
  };
  std::map<std::string, int> gpu = ops(GgmlType::Q4_K, true);
  EXPECT_EQ(gpu["NormQMatMul"], 3);
  EXPECT_EQ(gpu["QMatMul"], 0);
  EXPECT_EQ(gpu["SumReduce"], 0) << "the norm's row group is still planned";
  EXPECT_EQ(ops(GgmlType::Q4_K, false)["NormQMatMul"], 0);
  EXPECT_EQ(ops(GgmlType::Q4_0, true)["NormQMatMul"], 0);
  const testing::ScopedEnv off("LUMINAL_DISABLE_RULES", "rmsnorm-qmatmul");
  gpu = ops(GgmlType::Q6_K, true);
  EXPECT_EQ(gpu["NormQMatMul"], 0);
  EXPECT_EQ(gpu["QMatMul"], 3);
}

// A residual added to such a product, on either side of the Add, becomes part of it
// (QMatMulAdd; no Add kernel left) in the CUDA backend's plan, not in the CPU's; a bias
// broadcast along the rows is not a residual and stays an Add; nor is a product that
// something else reads too folded (it would run twice).
TEST(CudaCodegen, ResidualAddsFoldIntoBlockFormatProductsOnTheGpuOnly) {
  auto ops = [](bool cuda) {
    Graph cx;
    Tensor x = cx.named_tensor("x", {Expr::var("seq"), 512});
    Tensor r = cx.named_tensor("r", {Expr::var("seq"), 64});
    Tensor bias = cx.named_tensor("bias", {64});
    std::vector<Tensor> ws;
    for (const uint32_t type : {12u, 30u, 12u, 12u}) {  // Q4_K, BF16, Q4_K, Q4_K
      ws.push_back(cx.named_tensor("w" + std::to_string(ws.size()), {64, 512}));
      ws.back().set_quantized(type, testing::random_blocks(type, 64, 512, ws.size()));
    }
    (r + x.matmul(ws[0].transpose(0, 1))).retrieve();
    (x.matmul(ws[1].transpose(0, 1)) + r).retrieve();
    (x.matmul(ws[2].transpose(0, 1)) + bias.expand(0, Expr::var("seq"))).retrieve();
    const Tensor shared = x.matmul(ws[3].transpose(0, 1));
    (shared + r).retrieve();
    (shared * 2.0).retrieve();
    return planned_ops(cx, cuda);
  };
  std::map<std::string, int> gpu = ops(true);
  EXPECT_EQ(gpu["QMatMulAdd"], 2);
  EXPECT_EQ(gpu["QMatMul"], 2);
  EXPECT_EQ(gpu["Add"], 2);  // the bias, and the product read twice
  EXPECT_EQ(ops(false)["QMatMulAdd"], 0);
}

// Values added to a product of two operands of one type become part of it in the CUDA
// backend's plan (MatMulAdd: cuBLASLt adds them as it stores), not in the CPU's: a bias
// row with a residual stream, a residual on either side, a second product, a residual
// added to a product's rows viewed in another shape. Two matrices are not both folded
// (the epilogue adds one matrix and one row), nor a product that something else reads
// too (it would run twice), nor a view of the product's first rows alone.
TEST(CudaCodegen, AddsAfterAProductFoldIntoItOnTheGpuOnly) {
  auto planned = [](bool cuda) {
    Graph cx;
    Tensor x = cx.named_tensor("x", {Expr::var("seq"), 512}, DType::BF16);
    Tensor r = cx.named_tensor("r", {Expr::var("seq"), 64}, DType::BF16);
    Tensor r2 = cx.named_tensor("r2", {Expr::var("seq"), 64}, DType::BF16);
    Tensor bias = cx.named_tensor("bias", {64}, DType::BF16);
    std::vector<Tensor> xw;
    for (int i = 0; i < 6; ++i)
      xw.push_back(x.matmul(
          cx.named_tensor("w" + std::to_string(i), {64, 512}, DType::BF16).transpose(0, 1)));
    (r + (xw[0] + bias)).retrieve();
    (xw[1] + r).retrieve();
    ((xw[2] + r) + r2).retrieve();
    (xw[3] + r).retrieve();
    (xw[3] * 2.0).retrieve();
    (xw[4] + xw[5]).retrieve();
    // torch's linear layers: [B*T, K] rows multiplied, the result viewed as [B, T, N]
    Tensor rows = cx.named_tensor("rows", {6, 512}, DType::BF16);
    Tensor stream = cx.named_tensor("stream", {2, 3, 64}, DType::BF16);
    auto w = [&](const char* name) { return cx.named_tensor(name, {64, 512}, DType::BF16); };
    (stream + (rows.matmul(w("w6").transpose(0, 1)) + bias).reshape({2, 3, 64})).retrieve();
    (rows.matmul(w("w7").transpose(0, 1)).reshape({2, 3, 64}) + stream).retrieve();
    // ... but not a view of the product's first rows alone (in order, but not all of it)
    (rows.matmul(w("w8").transpose(0, 1)).slice(0, 0, 3) +
     cx.named_tensor("head", {3, 64}, DType::BF16))
        .retrieve();
    return cuda ? cudagen::compile_program(cx, "sm_90", true).planned
                : runtime::optimize_and_plan(cx, compiler::Fusion::StoreShared);
  };
  auto ops = [](const runtime::PlannedProgram& p) {
    std::map<std::string, int> count;
    std::multiset<size_t> addends;  // by MatMulAdd
    for (const compiler::Kernel& k : p.plan.kernels) {
      const Node& n = p.program.graph->node(k.root);
      ++count[n.op == Op::Custom ? n.custom->name() : std::string(op_name(n.op))];
      if (n.op == Op::Custom && n.custom->name() == "MatMulAdd")
        addends.insert(n.inputs.size() - 2);
    }
    return std::pair{count, addends};
  };
  auto [gpu, addends] = ops(planned(true));
  EXPECT_EQ(gpu["MatMulAdd"], 6);
  EXPECT_EQ(addends, (std::multiset<size_t>{1, 1, 1, 1, 2, 2}));
  EXPECT_EQ(gpu["MatMul"], 3);  // read twice, one of the summed two, the sliced one
  EXPECT_EQ(gpu["Add"], 3);     // the second matrix, the product read twice, the slice
  EXPECT_EQ(ops(planned(false)).first["MatMulAdd"], 0);
}

// MatMulAdd's reference semantics (what a backend falls back to) against brute force:
// batched products with a bias row and a matrix added, rounded once to bf16.
TEST(CudaCodegen, MatMulAddSemanticsAreTheSumOfProductsAndAddends) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-1, 1);
  const int64_t batch = 2, m = 3, k = 5, n = 4;
  auto random = [&](DType t, size_t count) {
    Buffer b(t, count);
    for (size_t i = 0; i < count; ++i) b.set_f64(i, u(rng));
    return b;
  };
  // The operands as the kernel reads them, [batch, M, K, N]; the addends [batch, M, N].
  const std::vector<int64_t> shape = {batch, m, k, n}, out_shape = {batch, m, n};
  const auto elems = static_cast<size_t>(batch * m * k * n),
             outs = static_cast<size_t>(batch * m * n);
  const std::vector<Buffer> in = {random(DType::F32, elems), random(DType::F32, elems),
                                  random(DType::F32, outs), random(DType::F32, outs)};
  const Buffer got =
      compiler::MatMulAddOp().run(in, {shape, shape, out_shape, out_shape}, out_shape, DType::BF16);
  for (size_t o = 0; o < outs; ++o) {
    double want = in[2].get_f64(o) + in[3].get_f64(o);
    for (int64_t p = 0; p < k; ++p) {
      const size_t at =
          (o / static_cast<size_t>(n) * static_cast<size_t>(k) + static_cast<size_t>(p)) *
              static_cast<size_t>(n) +
          o % static_cast<size_t>(n);
      want += in[0].get_f64(at) * in[1].get_f64(at);
    }
    Buffer rounded(DType::BF16, 1);
    rounded.set_f64(0, want);
    EXPECT_EQ(got.get_f64(o), rounded.get_f64(0)) << o;
  }
}

// Arena plans against brute force: over random sizes and lifetimes, no two values live at
// once share a byte, every offset is aligned, and space is reused (a chain of values each
// freed after its reader needs only two at a time).
TEST(CudaArena, LiveValuesNeverOverlapAndSpaceIsReused) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = 1 + rng() % 40;
    std::vector<size_t> sizes(n), released_after(n, n);  // n: never released
    for (size_t k = 0; k < n; ++k) {
      sizes[k] = rng() % 4 == 0 ? 0 : 1 + rng() % 5000;
      if (rng() % 5 != 0) released_after[k] = k + rng() % (n - k);
    }
    std::vector<std::pair<uint32_t, uint32_t>> releases(n);
    std::vector<int32_t> frees;
    for (size_t j = 0; j < n; ++j) {
      releases[j].first = static_cast<uint32_t>(frees.size());
      for (size_t k = 0; k < n; ++k)
        if (released_after[k] == j) frees.push_back(static_cast<int32_t>(k));
      releases[j].second = static_cast<uint32_t>(frees.size());
    }
    const cudagen::ArenaPlan p = cudagen::plan_arena(sizes, releases, frees);
    for (size_t b = 0; b < n; ++b) {
      if (!sizes[b]) continue;
      EXPECT_EQ(p.offsets[b] % 256, 0u);
      EXPECT_LE(p.offsets[b] + sizes[b], p.bytes);
      for (size_t a = 0; a < b; ++a) {
        if (!sizes[a] || released_after[a] < b) continue;  // a no longer holds its bytes
        EXPECT_TRUE(p.offsets[a] + sizes[a] <= p.offsets[b] ||
                    p.offsets[b] + sizes[b] <= p.offsets[a])
            << "trial " << trial << ": values " << a << " and " << b << " overlap";
      }
    }
  }
  std::vector<std::pair<uint32_t, uint32_t>> releases = {{0, 0}};
  std::vector<int32_t> frees;
  for (int32_t k = 1; k < 10; ++k) {  // kernel k reads value k - 1, then it is released
    releases.emplace_back(static_cast<uint32_t>(frees.size()),
                          static_cast<uint32_t>(frees.size() + 1));
    frees.push_back(k - 1);
  }
  EXPECT_EQ(cudagen::plan_arena(std::vector<size_t>(10, 1000), releases, frees).bytes, 2 * 1024u);
}

// The attention kernel's specialisations: decoding over an f16 cache with 16-byte loads,
// a prompt's tiles of rows over f32 keys, bf16 everything, and element-wise loads.
TEST(CudaCodegen, AttentionKernelsCompileForHopperAndTuring) {
  using cudagen::AttentionKernel;
  for (const AttentionKernel& spec : {
           AttentionKernel{DType::F32, DType::F16, DType::F16, DType::F32, 128, 128, 8, 8, 16, 4},
           AttentionKernel{DType::F32, DType::F32, DType::F32, DType::F32, 64, 64, 4, 4, 16, 8},
           AttentionKernel{DType::BF16, DType::BF16, DType::BF16, DType::BF16, 256, 256, 8, 8, 32,
                           8},
           AttentionKernel{DType::F16, DType::F16, DType::F32, DType::F16, 36, 20, 1, 1, 32, 3},
       })
    for (const char* arch : {"sm_90", "sm_75"})
      EXPECT_FALSE(cudagen::compile_cubin(cudagen::attention_source(spec), arch).code.empty())
          << arch << " d " << spec.d;
}

// The tensor-core kernel's: f32 queries split over an f16 cache, bf16 throughout, mixed
// key and value types, the largest head dims; and for Ampere, the oldest it runs on.
TEST(CudaCodegen, TensorCoreAttentionCompilesForAmpereAndHopper) {
  using cudagen::MmaAttentionKernel;
  for (const MmaAttentionKernel& spec : {
           MmaAttentionKernel{DType::F32, DType::F16, DType::F16, DType::F32, 128, 128},
           MmaAttentionKernel{DType::BF16, DType::BF16, DType::BF16, DType::BF16, 64, 64},
           MmaAttentionKernel{DType::F32, DType::BF16, DType::F16, DType::F32, 48, 32},
           MmaAttentionKernel{DType::F16, DType::F16, DType::F16, DType::F16, 256, 256},
       }) {
    ASSERT_TRUE(cudagen::mma_attention_supports(spec.q, spec.k, spec.v, spec.d, spec.dv));
    EXPECT_FALSE(cudagen::compile_cubin(cudagen::mma_attention_source(spec), "sm_90").code.empty())
        << "d " << spec.d;
  }
  EXPECT_FALSE(
      cudagen::compile_cubin(cudagen::mma_attention_source(
                                 {DType::BF16, DType::BF16, DType::BF16, DType::BF16, 128, 128}),
                             "sm_80")
          .code.empty());
  EXPECT_FALSE(cudagen::mma_attention_supports(DType::F16, DType::BF16, DType::BF16, 64, 64));
  EXPECT_FALSE(cudagen::mma_attention_supports(DType::F32, DType::F32, DType::F16, 64, 64));
  EXPECT_FALSE(cudagen::mma_attention_supports(DType::F32, DType::F16, DType::F16, 40, 64));
}

// Attention's backward kernels: bf16 and f16, head dims 16 to 128 (unequal too), for
// Hopper and Ampere, over a mask in bytes and over a causal mask computed from indices.
TEST(CudaCodegen, AttentionGradientKernelsCompile) {
  using cudagen::AttentionGradKernel;
  const std::string causal =
      cudagen::ComputedMask(ge(Expr::var("lum_m"), Expr::var("lum_t"))).source;
  for (const auto& [spec, arch] : std::vector<std::pair<AttentionGradKernel, const char*>>{
           {{DType::BF16, 64, 64}, "sm_90"},
           {{DType::F16, 128, 128}, "sm_90"},
           {{DType::BF16, 16, 48}, "sm_80"},
       })
    for (const std::string& mask : {std::string(), causal})
      EXPECT_FALSE(
          cudagen::compile_cubin(mask + cudagen::attention_grad_source(spec), arch).code.empty())
          << arch << " d " << spec.d << "/" << spec.dv << (mask.empty() ? "" : ", computed mask");
}

// The CUDA backend's program takes the backward kernels for attention over half types
// and the head dims they take (the rules decline f32 and a head dim of 8: the
// products over the scores run instead of a host fallback).
TEST(CudaCodegen, AttentionGradientsAreChosenWhereTheKernelsRun) {
  const auto cases = testing::attention_gradient_cases(true);
  for (const auto& [d, t, parts] : std::vector<std::tuple<int64_t, DType, size_t>>{
           {64, DType::BF16, 3}, {64, DType::F32, 0}, {8, DType::BF16, 0}}) {
    testing::AttentionGradientCase c =
        *std::find_if(cases.begin(), cases.end(), [&](const auto& x) { return x.d == d; });
    c.dtype = t;
    std::mt19937 rng(7);
    Graph cx;
    testing::attention_gradient_graph(cx, c, rng);
    const cudagen::CompiledProgram p = cudagen::compile_program(cx, "sm_90", true);
    size_t found = 0;
    const Graph& g = *p.planned.program.graph;
    for (uint32_t i = 0; i < g.num_nodes(); ++i)
      found +=
          dynamic_cast<const compiler::AttentionGradOp*>(g.node(NodeId{i}).custom.get()) != nullptr;
    EXPECT_EQ(found, parts) << c.label();
  }
}

// The warpgroup kernels', for sm_90a: bf16 and f16, head dims 64 to 256 (the largest
// with tiles of 64 keys), outputs of another type, f32 queries split over a half cache,
// with one consumer a block (two and three blocks an SM) and two; what they do not take.
TEST(CudaCodegen, WarpgroupAttentionCompilesForHopper) {
  using cudagen::WgmmaAttentionKernel;
  for (const auto& [q, type, out, d, dv, keys] :
       std::vector<std::tuple<DType, DType, DType, int64_t, int64_t, int64_t>>{
           {DType::BF16, DType::BF16, DType::BF16, 128, 128, 4096},
           {DType::F16, DType::F16, DType::F32, 64, 64, 256},
           {DType::BF16, DType::BF16, DType::F16, 256, 128, 4096},
           {DType::F32, DType::F16, DType::F32, 128, 128, 512},
           {DType::F32, DType::BF16, DType::F32, 64, 128, 4096},
       }) {
    ASSERT_TRUE(cudagen::wgmma_attention_supports(q, type, type, d, dv));
    const std::vector<WgmmaAttentionKernel> kernels =
        cudagen::wgmma_attention_kernels(q, type, out, d, dv, keys);
    // Short prompts (a block's rows see few tiles) take one consumer a block first, a
    // persistent one where there is one (the most blocks an SM); longer ones two.
    EXPECT_EQ(kernels.front().consumers, keys <= 1024 && kernels.size() > 1 ? 1 : 2) << "d " << d;
    EXPECT_EQ(kernels.front().persistent, keys <= 1024 && q == type && d <= 128) << "d " << d;
    if (kernels.front().persistent) {
      EXPECT_EQ(kernels.front().blocks_per_sm, d <= 64 && dv <= 64 ? 3 : 2) << "d " << d;
    }
    for (const WgmmaAttentionKernel& spec : kernels) {
      EXPECT_LE(spec.blocks_per_sm * (cudagen::wgmma_attention_shared_bytes(spec) + 1024),
                228u * 1024)
          << spec.describe() << ", d " << d;
      EXPECT_FALSE(
          cudagen::compile_cubin(cudagen::wgmma_attention_source(spec), "sm_90a").code.empty())
          << spec.describe() << ", d " << d;
    }
    // Three blocks an SM at head dims of 64 only (their outputs' registers).
    EXPECT_EQ(std::count_if(kernels.begin(), kernels.end(),
                            [](const WgmmaAttentionKernel& k) {
                              return k.blocks_per_sm == 3 && !k.persistent;
                            }),
              q != DType::F32 && d == 64 && dv == 64 ? 1 : 0)
        << "d " << d;
    // Persistent ones where the queries are copied as they are (and two buffers of them
    // fit beside the stages: not at head dims of 256), one consumer each.
    const auto persistent = std::count_if(
        kernels.begin(), kernels.end(), [](const WgmmaAttentionKernel& k) { return k.persistent; });
    EXPECT_EQ(persistent > 0, q == type && d <= 128) << "d " << d;
    for (const WgmmaAttentionKernel& k : kernels) {
      if (k.persistent) {
        EXPECT_EQ(k.consumers, 1) << k.describe();
      }
    }
  }
  const auto bf16 = DType::BF16;
  EXPECT_EQ(cudagen::wgmma_attention_kernels(bf16, bf16, bf16, 128, 128, 4096).front().keys, 128);
  EXPECT_EQ(cudagen::wgmma_attention_kernels(bf16, bf16, bf16, 256, 128, 4096).front().keys, 64);
  EXPECT_FALSE(cudagen::wgmma_attention_supports(DType::F16, bf16, bf16, 128, 128));
  EXPECT_FALSE(cudagen::wgmma_attention_supports(DType::F32, DType::F16, bf16, 128, 128));
  EXPECT_FALSE(cudagen::wgmma_attention_supports(DType::F32, bf16, bf16, 256, 128));
  EXPECT_FALSE(cudagen::wgmma_attention_supports(bf16, bf16, bf16, 96, 96));
  EXPECT_FALSE(cudagen::wgmma_attention_supports(bf16, bf16, bf16, 128, 256));
}

// The streaming kernel's, on CUDA cores: f32 queries over an f16 cache (a decode step of
// an f32 model), bf16 throughout with eight rows, f32 keys and values (four to a piece, a
// lane each), the smallest and largest rows of pieces, mixed key and value types; and on
// tensor cores: f32 queries split over an f16 cache, sixteen rows, the largest head dims,
// one row; for Ampere too.
TEST(CudaCodegen, StreamingAttentionCompilesForAmpereAndHopper) {
  using cudagen::StreamAttentionKernel;
  for (const StreamAttentionKernel& spec : {
           StreamAttentionKernel{DType::F32, DType::F16, DType::F16, DType::F32, 128, 128, 4},
           StreamAttentionKernel{DType::BF16, DType::BF16, DType::BF16, DType::BF16, 128, 128, 8},
           StreamAttentionKernel{DType::F32, DType::F32, DType::F32, DType::F32, 128, 128, 3},
           StreamAttentionKernel{DType::F16, DType::F16, DType::F16, DType::F16, 8, 8, 1},
           StreamAttentionKernel{DType::BF16, DType::BF16, DType::BF16, DType::F32, 256, 256, 8},
           StreamAttentionKernel{DType::F32, DType::F16, DType::F32, DType::F32, 64, 32, 2},
           StreamAttentionKernel{DType::F32, DType::F16, DType::F16, DType::F32, 128, 128, 4, true},
           StreamAttentionKernel{DType::BF16, DType::BF16, DType::BF16, DType::BF16, 128, 128, 16,
                                 true},
           StreamAttentionKernel{DType::BF16, DType::BF16, DType::BF16, DType::F32, 256, 256, 8,
                                 true},
           StreamAttentionKernel{DType::F16, DType::F16, DType::F16, DType::F16, 64, 64, 1, true},
       }) {
    ASSERT_TRUE(cudagen::stream_attention_supports(spec.k, spec.v, spec.d, spec.dv)) << spec.d;
    for (const char* arch : {"sm_90", "sm_80"})
      EXPECT_FALSE(
          cudagen::compile_cubin(cudagen::stream_attention_source(spec), arch).code.empty())
          << arch << " d " << spec.d;
  }
  // Rows of different piece counts, a count that is not a power of two, too many.
  EXPECT_FALSE(cudagen::stream_attention_supports(DType::F16, DType::F16, 128, 64));
  EXPECT_FALSE(cudagen::stream_attention_supports(DType::F16, DType::F16, 96, 96));
  EXPECT_FALSE(cudagen::stream_attention_supports(DType::F32, DType::F32, 256, 256));
  EXPECT_FALSE(cudagen::stream_attention_supports(DType::F16, DType::F16, 36, 36));
}

// The keys a streaming attention may read before the kernel ahead finishes: of random
// views (a cache's keys as the attention op reads them among them) over memory whose first
// `settled` bytes no kernel writes, the largest n such that every element of keys [0, n)
// lies in those bytes, against every element's offset enumerated.
TEST(CudaCodegen, EarlyKeysAreThoseWithinTheSettledBytes) {
  std::mt19937 rng(7);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  for (int trial = 0; trial < 2000; ++trial) {
    ConcreteView v;
    const size_t rank = static_cast<size_t>(pick(2, 4));
    for (size_t i = 0; i < rank; ++i)
      v.dims.push_back(pick(1, 5)), v.strides.push_back(pick(0, 12));
    v.offset = pick(0, 9);
    const size_t axis = static_cast<size_t>(pick(0, static_cast<int64_t>(rank) - 1));
    const size_t element = pick(0, 1) ? 2 : 4;
    int64_t largest = v.offset;
    for (size_t i = 0; i < rank; ++i) largest += (v.dims[i] - 1) * v.strides[i];
    const auto settled =
        static_cast<size_t>(pick(0, (largest + 3) * static_cast<int64_t>(element)));
    // Brute force: the keys from 0 on while each one's elements all end within `settled`.
    int64_t want = 0;
    for (; want < v.dims[axis]; ++want) {
      bool inside = true;
      std::vector<int64_t> at(rank, 0);
      at[axis] = want;
      for (bool more = true; more && inside;) {
        int64_t offset = v.offset;
        for (size_t i = 0; i < rank; ++i) offset += at[i] * v.strides[i];
        inside = static_cast<size_t>(offset + 1) * element <= settled;
        more = false;
        for (size_t i = rank; i-- > 0;) {
          if (i == axis) continue;
          if (++at[i] < v.dims[i]) {
            more = true;
            break;
          }
          at[i] = 0;
        }
      }
      if (!inside) break;
    }
    EXPECT_EQ(cudagen::keys_within(v, axis, element, settled), want)
        << "trial " << trial << " settled " << settled;
    EXPECT_EQ(cudagen::keys_within(v, axis, element, std::numeric_limits<size_t>::max()),
              v.dims[axis]);
  }
  // A cache of 10 past rows of [2 heads, 4 dims] in f16, appended a row: the attention
  // reads its keys as [heads, 1, 4 dims, 11 keys]; its first 10 keys are settled.
  const ConcreteView keys{{2, 1, 4, 11}, {4, 0, 1, 8}, {}, {}, 0};
  EXPECT_EQ(cudagen::keys_within(keys, 3, 2, 10 * 8 * 2), 10);
  EXPECT_EQ(cudagen::keys_within(keys, 3, 2, 10 * 8 * 2 - 1), 9);
  // A view walking its memory backwards reads nothing early.
  const ConcreteView backwards{{2, 1, 4, 11}, {4, 0, 1, -8}, {}, {}, 80};
  EXPECT_EQ(cudagen::keys_within(backwards, 3, 2, 1 << 20), 0);
}

// A causal mask (windowed or not, its past a dim or a number) is computed inside the
// attention kernels: its iota is no kernel of the GPU's plan, the index expression the
// kernels evaluate keeps what the iota keeps at every (row, key) of several shapes (the
// iota evaluated by the reference interpreter, read through the mask's view), it divides
// nothing (so telling a prompt's tiles apart costs no divisions), and every attention
// kernel compiles with the windowed one.
TEST(CudaCodegen, CausalMasksAreComputedInsideTheAttentionKernels) {
  for (const auto& [past, window] :
       std::vector<std::pair<Expr, int64_t>>{{Expr("past"), 0}, {Expr("past"), 5}, {Expr(3), 0}}) {
    Graph cx;
    Tensor q = cx.named_tensor("q", {2, 4, "seq", 64}, DType::BF16);
    Tensor k = cx.named_tensor("k", {Expr("seq") + past, 2, 64}, DType::BF16);
    Tensor v = cx.named_tensor("v", {Expr("seq") + past, 2, 64}, DType::BF16);
    Tensor scores = q.matmul(k.permute({1, 0, 2}).unsqueeze(1).transpose(-1, -2)) * 0.125;
    scores = where(nn::causal_mask(cx, "seq", past, window), scores,
                   -std::numeric_limits<double>::infinity());
    scores.softmax(-1).matmul(v.permute({1, 0, 2}).unsqueeze(1)).retrieve();
    const std::string what = "past " + past.to_string() + " window " + std::to_string(window);

    const runtime::PlannedProgram p = runtime::optimize_and_plan(
        cx, compiler::Fusion::RecomputeShared, {.product_fusions = true}, true);
    const Graph& g = *p.program.graph;
    const Node* attention = nullptr;
    for (const compiler::Kernel& kn : p.plan.kernels) {
      EXPECT_NE(g.node(kn.root).op, Op::Iota) << what;
      if (dynamic_cast<const compiler::AttentionOp*>(g.node(kn.root).custom.get()))
        attention = &g.node(kn.root);
    }
    ASSERT_NE(attention, nullptr) << what;
    const std::optional<Expr> keep = compiler::computed_mask(g, *attention);
    ASSERT_TRUE(keep) << what;
    EXPECT_EQ(keep->to_c().find("lum_floor"), std::string::npos) << what << ": " << *keep;

    const Edge& mask = attention->inputs[3];
    for (const auto& [seq, past_value] :
         std::vector<std::pair<int64_t, int64_t>>{{1, 0}, {1, 37}, {7, 12}, {40, 0}, {9, 3}}) {
      if (past.is_const() && *past.as_const() != past_value) continue;
      Bindings dims{{"seq", seq}, {"past", past_value}};
      const Buffer iota = source_values(g.node(mask.source), dims);
      const ConcreteView view = mask.view.resolve(dims);
      ASSERT_FALSE(view.has_mask());
      const size_t r = view.dims.size();
      for (int64_t m = 0; m < seq; ++m)
        for (int64_t t = 0; t < seq + past_value; ++t) {
          const auto at = view.offset + m * view.strides[r - 2] + t * view.strides[r - 1];
          dims.set("lum_m", m);
          dims.set("lum_t", t);
          ASSERT_EQ(keep->eval(dims) != 0, iota.get_f64(static_cast<size_t>(at)) != 0)
              << what << " seq " << seq << " past " << past_value << " row " << m << " key " << t;
        }
    }

    if (window == 0) continue;  // (the windowed mask's expression is the longest)
    using namespace cudagen;
    const std::string prefix = ComputedMask(*keep).source;
    const DType f32 = DType::F32, f16 = DType::F16, bf16 = DType::BF16;
    EXPECT_FALSE(compile_cubin(prefix + attention_source(AttentionKernel{f32, f16, f16, f32, 128,
                                                                         128, 8, 8, 16, 4}),
                               "sm_90")
                     .code.empty())
        << what;
    EXPECT_FALSE(
        compile_cubin(prefix + mma_attention_source({bf16, bf16, bf16, bf16, 128, 128}), "sm_90")
            .code.empty())
        << what;
    EXPECT_FALSE(
        compile_cubin(
            prefix + wgmma_attention_source(
                         wgmma_attention_kernels(bf16, bf16, bf16, 128, 128, 4096).front()),
            "sm_90a")
            .code.empty())
        << what;
    EXPECT_FALSE(compile_cubin(prefix + stream_attention_source(StreamAttentionKernel{
                                            f32, f16, f16, f32, 128, 128, 4, true}),
                               "sm_90")
                     .code.empty())
        << what;
  }
}

// Half-precision conversions use instructions of sm_80 and later where they exist; older
// GPUs get the portable ones.
TEST(CudaCodegen, HalfPrecisionKernelsCompileForTuring) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {4, 1000}, DType::BF16);
  (x.softmax(1) + x.cast(DType::F16).cast(DType::BF16)).retrieve();
  EXPECT_NO_THROW(cudagen::compile_program(cx, "sm_75", true));
  EXPECT_FALSE(cudagen::compile_cubin(cudagen::gemv_source({cudagen::kGemvShapes[0]}), "sm_75")
                   .code.empty());
}

// Independent elementwise kernels that reductions keep apart are moved together and
// made one launch of three members (each with its own elements), which compiles.
TEST(CudaCodegen, IndependentElementwiseKernelsAreOneLaunch) {
  Graph cx;
  std::mt19937 rng(3);
  testing::independent_maps(cx, 5000, rng);
  const cudagen::CompiledProgram c = cudagen::compile_program(cx, "sm_90", true);
  std::vector<size_t> members;
  for (const cudagen::KernelLaunch& l : c.source.launches)
    if (l.shape == KernelShape::Maps) members.push_back(l.member_threads.size());
  EXPECT_EQ(members, std::vector<size_t>{3});
  ASSERT_EQ(c.cubins.size(), c.source.parts.size());
  EXPECT_FALSE(c.cubins[0].code.empty());
}

// Kernels are launched before the kernel ahead of them finishes (programmatic dependent
// launch); each must wait for it before anything else, in every block, or a kernel that
// ended early would let its successor overtake its predecessor. So the body of every
// __global__ function in every source the backend compiles starts with the wait. One
// exception: the streaming attention may first copy keys and values that lie in memory no
// kernel of the run writes (AttentionArgs::early_keys), and before its wait reads nothing
// else (no query, mask, output or split piece).
void expect_every_kernel_waits_first(const std::string& source, const std::string& what) {
  size_t kernels = 0;
  for (size_t at = source.find("__global__"); at != std::string::npos;
       at = source.find("__global__", at + 1)) {
    size_t body = source.find('{', at);
    ASSERT_NE(body, std::string::npos) << what;
    body = source.find_first_not_of(" \t\n\\", body + 1);
    ++kernels;
    if (source.substr(at, body - at).find("lum_attention_stream(") != std::string::npos) {
      const size_t wait = source.find("lum_after_prior_grids();", body);
      ASSERT_NE(wait, std::string::npos) << what << ": the streaming kernel never waits";
      const std::string before = source.substr(body, wait - body);
      EXPECT_NE(before.find("a.early_keys"), std::string::npos) << what;
      for (const char* other : {"a.q", "a.mask", "a.out", "a.partials", "lum_at_row", "mask_of("})
        EXPECT_EQ(before.find(other), std::string::npos)
            << what << ": the streaming kernel reads " << other << " before it waits";
      continue;
    }
    EXPECT_EQ(source.compare(body, 24, "lum_after_prior_grids();"), 0)
        << what << ": a kernel starts with " << source.substr(body, 60);
  }
  EXPECT_GT(kernels, 0u) << what;
}

TEST(CudaCodegen, EveryKernelWaitsForTheKernelBeforeItFirst) {
  using namespace cudagen;
  expect_every_kernel_waits_first(gemv_source({std::begin(kGemvShapes), std::end(kGemvShapes)}),
                                  "one-row products");
  expect_every_kernel_waits_first(copy_view_source(), "view copies");
  expect_every_kernel_waits_first(top_k_source(), "top k");
  expect_every_kernel_waits_first(window_products_source(), "window products");
  expect_every_kernel_waits_first(expert_products_source(), "expert products");
  expect_every_kernel_waits_first(peer_all_reduce_source(), "all-reduce over peer memory");
  expect_every_kernel_waits_first(quant_products_source(static_cast<uint32_t>(GgmlType::Q4_K)),
                                  "quantised products");
  const DType f32 = DType::F32, f16 = DType::F16, bf16 = DType::BF16;
  expect_every_kernel_waits_first(
      attention_source(AttentionKernel{f32, f16, f16, f32, 128, 128, 8, 8, 16, 4}), "attention");
  expect_every_kernel_waits_first(
      mma_attention_source(MmaAttentionKernel{bf16, bf16, bf16, bf16, 128, 128}),
      "tensor-core attention");
  expect_every_kernel_waits_first(
      wgmma_attention_source(wgmma_attention_kernels(bf16, bf16, bf16, 128, 128, 4096).front()),
      "warpgroup attention");
  expect_every_kernel_waits_first(
      stream_attention_source(StreamAttentionKernel{f32, f16, f16, f32, 128, 128, 4}),
      "streaming attention");
  Graph cx;
  Tensor x = cx.named_tensor("x", {4, 1000}, DType::BF16);
  Tensor i = cx.named_tensor("i", {3}, DType::I32);
  Tensor values = cx.named_tensor("values", {3}, DType::BF16);
  (x.softmax(1) + x.cast(DType::F16).cast(DType::BF16)).retrieve();
  x.scatter(i, values).retrieve();
  const runtime::PlannedProgram p =
      runtime::optimize_and_plan(cx, compiler::Fusion::RecomputeShared);
  expect_every_kernel_waits_first(generate_cuda_source(*p.program.graph, p.plan).code,
                                  "generated kernels");
}

// A window product's views as the backend hands them over, built from a convolution's
// definition (image x, channels last or first, stride, dilation, a strided 1x1 and a 1-D
// one), read back as cuDNN's descriptors: every element of every window at the offset the
// view reads it, every output where the product stores it, the filter packed as the
// weight is, x no larger than its memory and (where x is a packed tensor) all of it.
TEST(CudnnConvolutionOf, EveryWindowLiesWhereTheViewReadsIt) {
  struct Case {
    int64_t n, c, h, w, k, r, s, u, v, dh, dw;
    bool channels_last, image_in_rows, transposed;
  };
  const std::vector<Case> cases = {
      {2, 16, 11, 13, 24, 3, 3, 1, 1, 1, 1, true, false, false},
      {2, 16, 11, 13, 24, 3, 3, 1, 1, 1, 1, true, false, true},
      {3, 8, 12, 12, 16, 3, 3, 1, 1, 2, 2, true, true, false},
      {2, 64, 58, 58, 128, 3, 3, 2, 2, 1, 1, true, true, false},
      {2, 64, 56, 56, 128, 1, 1, 2, 2, 1, 1, true, false, true},
      {3, 3, 230, 230, 64, 7, 7, 2, 2, 1, 1, false, false, false},
      {3, 3, 230, 230, 64, 7, 7, 2, 2, 1, 1, false, true, true},
      {2, 8, 1, 37, 12, 1, 5, 1, 1, 1, 1, true, false, true},
      {1, 32, 9, 9, 8, 2, 3, 3, 2, 1, 2, false, false, true},
  };
  for (const Case& c : cases) {
    const std::string what = "case " + std::to_string(&c - cases.data());
    const int64_t p = (c.h - ((c.r - 1) * c.dh + 1)) / c.u + 1;
    const int64_t q = (c.w - ((c.s - 1) * c.dw + 1)) / c.v + 1;
    // x's strides: channels last [n, h, w, c], else [n, c, h, w].
    const int64_t sc = c.channels_last ? 1 : c.h * c.w, sw = c.channels_last ? c.c : 1;
    const int64_t sh = sw * c.w, sn = c.c * c.h * c.w;
    // a: [n, p, q, sums..., k] (the images a batch dim, or the rows' first); the sums
    // r, s, c channels last, else c, r, s. b: [n?, m, sum, k], the weight's rows packed.
    ConcreteView a, b;
    const auto add = [](ConcreteView& v, int64_t dim, int64_t stride) {
      v.dims.push_back(dim);
      v.strides.push_back(stride);
      v.mask_lo.push_back(0);
      v.mask_hi.push_back(dim);
    };
    const int64_t sum = c.c * c.r * c.s;
    add(a, c.n, sn);
    add(a, p, c.u * sh);
    add(a, q, c.v * sw);
    if (!c.channels_last) add(a, c.c, sc);
    add(a, c.r, c.dh * sh);
    add(a, c.s, c.dw * sw);
    if (c.channels_last) add(a, c.c, sc);
    add(a, c.k, 0);
    if (!c.image_in_rows) add(b, c.n, 0);
    add(b, c.image_in_rows ? c.n * p * q : p * q, 0);
    add(b, sum, 1);
    add(b, c.k, sum);
    const size_t row_dims = c.image_in_rows ? 3 : 2;
    const std::optional<cudagen::Convolution2d> conv =
        cudagen::convolution_of(a, b, row_dims, c.transposed);
    ASSERT_TRUE(conv) << what;
    const std::string d = what + ": " + conv->describe();
    EXPECT_EQ(conv->filter, (std::array<int, 4>{int(c.k), int(c.c), int(c.r), int(c.s)})) << d;
    EXPECT_EQ(conv->filter_channels_last, c.channels_last) << d;
    EXPECT_EQ(conv->y_dims, (std::array<int, 4>{int(c.n), int(c.k), int(p), int(q)})) << d;
    // cuDNN's output size over x as described, with no padding.
    for (int i = 0; i < 2; ++i) {
      const int64_t span = (conv->filter[2 + i] - 1) * conv->dilation[i] + 1;
      EXPECT_EQ((conv->x_dims[2 + i] - span) / conv->stride[i] + 1, conv->y_dims[2 + i]) << d;
    }
    // x as a packed tensor where it is one (all of these are).
    EXPECT_EQ(conv->x_dims, (std::array<int, 4>{int(c.n), int(c.c), int(c.h), int(c.w)})) << d;
    const auto& xs = conv->x_strides;
    int64_t last = 0;
    for (int i = 0; i < 4; ++i) last += int64_t{conv->x_dims[i] - 1} * xs[i];
    EXPECT_LT(last, c.n * sn) << d;
    for (int64_t n = 0; n < c.n; ++n)
      for (int64_t y = 0; y < p; ++y)
        for (int64_t x = 0; x < q; ++x)
          for (int64_t i = 0; i < c.r; ++i)
            for (int64_t j = 0; j < c.s; ++j)
              for (int64_t ch = 0; ch < c.c; ++ch) {
                const int64_t by_view =
                    n * sn + y * c.u * sh + x * c.v * sw + i * c.dh * sh + j * c.dw * sw + ch * sc;
                const int64_t by_conv =
                    n * xs[0] + ch * xs[1] +
                    (y * conv->stride[0] + i * conv->dilation[0]) * int64_t{xs[2]} +
                    (x * conv->stride[1] + j * conv->dilation[1]) * int64_t{xs[3]};
                ASSERT_EQ(by_conv, by_view) << d << " at " << n << " " << y << " " << x << " " << i
                                            << " " << j << " " << ch;
              }
    // The weight: element (channel o, sum index) of b, which walks the sum's dims as a does.
    for (int64_t o = 0; o < c.k; ++o)
      for (int64_t i = 0; i < c.r; ++i)
        for (int64_t j = 0; j < c.s; ++j)
          for (int64_t ch = 0; ch < c.c; ++ch) {
            const int64_t index =
                c.channels_last ? (i * c.s + j) * c.c + ch : (ch * c.r + i) * c.s + j;
            const int64_t packed = c.channels_last ? ((o * c.r + i) * c.s + j) * c.c + ch
                                                   : ((o * c.c + ch) * c.r + i) * c.s + j;
            ASSERT_EQ(packed, o * sum + index) << d;
          }
    // The output: [batch..., m, k] or [batch..., k, m], m over (n?, y, x).
    const auto& ys = conv->y_strides;
    const int64_t m = (c.image_in_rows ? c.n : 1) * p * q;
    for (int64_t n = 0; n < c.n; ++n)
      for (int64_t o = 0; o < c.k; ++o)
        for (int64_t y = 0; y < p; ++y)
          for (int64_t x = 0; x < q; ++x) {
            const int64_t row = ((c.image_in_rows ? n : 0) * p + y) * q + x;
            const int64_t z = c.image_in_rows ? 0 : n;
            const int64_t want = c.transposed ? (z * c.k + o) * m + row : (z * m + row) * c.k + o;
            ASSERT_EQ(n * ys[0] + o * ys[1] + y * ys[2] + x * ys[3], want) << d;
          }
  }
  // Not a convolution cuDNN runs: a weight read across its rows, one varying by image.
  ConcreteView a;
  for (int64_t dim : {2, 5, 5, 3, 3, 8, 4}) {
    a.dims.push_back(dim);
    a.mask_lo.push_back(0);
    a.mask_hi.push_back(dim);
  }
  a.strides = {392, 56, 8, 56, 8, 1, 0};
  ConcreteView b{{2, 25, 72, 4}, {0, 0, 4, 1}, {0, 0, 0, 0}, {2, 25, 72, 4}};
  EXPECT_FALSE(cudagen::convolution_of(a, b, 2, false));
  b.strides = {288, 0, 1, 72};
  EXPECT_FALSE(cudagen::convolution_of(a, b, 2, false));
  b.strides = {0, 0, 1, 72};
  EXPECT_TRUE(cudagen::convolution_of(a, b, 2, false));
}

TEST(CudaCodegen, ProductsCompileForHopper) {
  testing::expect_matmuls_match_reference(testing::NvrtcOnly());
}

// A BatchNorm in eval mode over NHWC-stored products (a ResNet layer's, bf16): the
// per-channel values it reads broadcast (mean, 1/sqrt(var + eps), weight, bias) are put
// in shared memory by each block before the loop, so the loop takes no square root and
// loads no parameter, also where the kernel shares its function with another (a map
// group). A broadcast repeated only a few times (a bias added to two rows) is read in the
// loop as before.
TEST(CudaCodegen, BroadcastValuesAreHeldInSharedMemory) {
  for (const bool symbolic : {false, true}) {
    Graph cx;
    const DType bf = DType::BF16;
    const Expr n = symbolic ? Expr::var("n") : Expr(8);
    Tensor x = cx.named_tensor("x", {n, 28, 28, 64}, bf).permute({0, 3, 1, 2});
    const auto channel = [&](const char* name) {
      return cx.named_tensor(name, {64}, bf).reshape({1, 64, 1, 1});
    };
    Tensor w = cx.named_tensor("w", {64, 64, 3, 3}, bf);
    Tensor y = conv2d(x, w, {}, {.padding = 1});
    ((y - channel("mean")) * (channel("var") + 1e-5).rsqrt() * channel("scale") + channel("shift"))
        .relu()
        .retrieve();
    (cx.named_tensor("other", {1000}) * 2.0).retrieve();  // (joins the norm's map group)
    const std::string code = cudagen::compile_program(cx, "sm_90", true).source.code;
    size_t norms = 0;
    for (size_t at = code.find("__global__"); at != std::string::npos;) {
      const size_t next = code.find("__global__", at + 1);
      const std::string kernel = code.substr(at, next - at);
      at = next;
      if (kernel.find("sqrtf") == std::string::npos) continue;
      ++norms;
      EXPECT_NE(kernel.find("__syncthreads();"), std::string::npos) << kernel;
      std::istringstream lines(kernel);
      std::string loop;
      for (std::string line; std::getline(lines, line);) {
        if (line.find("for (") != std::string::npos) loop = line;
        if (line.find("sqrtf") != std::string::npos ||
            std::regex_search(line, std::regex(R"(in\d+\[lum_i\d+\])"))) {
          EXPECT_NE(loop.find("lum_j"), std::string::npos)
              << "computed or loaded for every element: " << line << "\n"
              << kernel;
        }
      }
    }
    EXPECT_EQ(norms, 1u) << code;
  }
  Graph cx;
  (cx.named_tensor("rows", {2, 64}) + cx.named_tensor("bias", {64})).retrieve();
  const std::string code = cudagen::compile_program(cx, "sm_90", true).source.code;
  EXPECT_EQ(code.find("__shared__"), std::string::npos) << code;
}

// Pooling over a 2-D window is one kernel: the reduction over each window row runs inside
// the one over the rows, a nested loop, rather than a kernel of its own writing every
// row's result (three times the output, for a 3x3 window) for another to read back. A
// 3-D window nests three deep.
TEST(CudaCodegen, PoolingWindowsAreOneKernel) {
  const auto kernels = [](const std::function<Tensor(Tensor)>& pool, size_t rank) {
    Graph cx;
    std::vector<Expr> shape = {Expr::var("n"), 16, 12, 12, 12};
    shape.resize(rank);
    pool(cx.named_tensor("x", shape, DType::BF16).relu()).retrieve();
    const std::string code = cudagen::compile_program(cx, "sm_90", true).source.code;
    return std::make_pair(launches(cx), code);
  };
  const auto [max2, max2_code] =
      kernels([](Tensor x) { return max_pool2d(x, {.kernel = 3, .stride = 2, .padding = 1}); }, 4);
  EXPECT_EQ(max2, std::vector<KernelShape>{KernelShape::Reduce}) << max2_code;
  EXPECT_TRUE(
      std::regex_search(max2_code, std::regex(R"(for \(int64_t lum_r\d+ = 0; lum_r\d+ < 3;)")))
      << max2_code;
  const auto [max3, max3_code] =
      kernels([](Tensor x) { return max_pool3d(x, {.kernel = 2, .stride = 2}); }, 5);
  EXPECT_EQ(max3, std::vector<KernelShape>{KernelShape::Reduce}) << max3_code;
  // Average pooling: the window's sum, then the division by its size.
  const auto [avg2, avg2_code] =
      kernels([](Tensor x) { return avg_pool2d(x, {.kernel = 2, .stride = 2}); }, 4);
  EXPECT_EQ(avg2, (std::vector<KernelShape>{KernelShape::Reduce, KernelShape::Map})) << avg2_code;
}

}  // namespace

// The CUDA backend's program on the interpreter, without a GPU: grouped-query attention
// whose output is read through a view that merges its key heads and group (PyTorch's
// shape), stored in that view's order by the CUDA program, gives the reference's values.
TEST(CudaProgramReference, RunsTheCudaBackendsProgramOnTheInterpreter) {
  const int64_t b = 2, kv = 2, group = 3, t = 9, d = 8;
  Graph cx;
  Tensor q = cx.named_tensor("q", {b, kv, group, t, d});
  Tensor k = cx.named_tensor("k", {b, kv, t, d}), v = cx.named_tensor("v", {b, kv, t, d});
  Tensor w = cx.named_tensor("w", {kv * group * d, 5});
  std::mt19937 rng(8);
  for (Tensor* x : {&q, &k, &v, &w}) {
    std::vector<float> values(static_cast<size_t>(product(x->shape()).eval()));
    for (float& e : values) e = std::uniform_real_distribution<float>(-1, 1)(rng);
    x->set(values);
  }
  const Tensor scores = q.matmul(k.expand(2, group).transpose(-1, -2)) * (1 / std::sqrt(8.0));
  const Tensor a =
      where(nn::causal_mask(cx, t, 0), scores, -std::numeric_limits<double>::infinity())
          .softmax(-1)
          .matmul(v.expand(2, group));
  Tensor y = a.reshape({b, kv * group, t, d})
                 .transpose(1, 2)
                 .reshape({b, t, kv * group * d})
                 .matmul(w)
                 .retrieve();
  cx.compile(cuda_program_reference());
  cx.execute();
  const std::vector<float> got = y.to_f32();
  cx.compile(reference());
  cx.execute();
  const std::vector<float> want = y.to_f32();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4) << i;
}

}  // namespace luminal

#else
TEST(CudaCodegen, NotBuilt) {
  GTEST_SKIP() << "built without CUDA (-DLUMINAL_CUDA=OFF)";
}
#endif
