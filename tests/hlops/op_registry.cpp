// Maps each fixture op name to the luminal composite it checks (mirrors OPS in
// tools/fixtures/make_hlops.py).
#include <functional>
#include <unordered_map>

#include "hlops/fixture.hpp"

namespace luminal::testing {
namespace {

using In = std::vector<Tensor>;
using Builder = std::function<Tensor(Graph&, const In&, const Params&)>;

std::vector<int> axes(const Params& p, const char* key = "axes") {
  std::vector<int> out;
  for (int64_t a : p.ints(key)) out.push_back(static_cast<int>(a));
  return out;
}
bool keepdim(const Params& p) {
  return p.has("keepdim") && p.i("keepdim") == 1;
}
int axis(const Params& p) {
  return static_cast<int>(p.i("axis"));
}
std::vector<Expr> shape(const Params& p, const char* key = "shape") {
  std::vector<Expr> out;
  for (int64_t d : p.ints(key)) out.emplace_back(d);
  return out;
}
ConvOptions conv_options(const Params& p) {
  return {p.i("stride"), p.i("padding"), p.i("dilation"), p.i("groups")};
}
PoolOptions pool_options(const Params& p) {
  return {p.i("kernel"), p.i("stride"), p.i("padding")};
}

// torch.nn.functional.pad: (before, after) pairs starting from the last dimension.
Tensor pad_like_torch(const Tensor& x, const Params& p) {
  const auto pads = p.ints("pad");
  Tensor out = x;
  for (size_t k = 0; k + 1 < pads.size(); k += 2)
    out = out.pad(-1 - static_cast<int>(k / 2), pads[k], pads[k + 1], p.f("value"));
  return out;
}

DType dtype_named(const std::string& torch_name) {
  static const std::unordered_map<std::string, DType> names = {
      {"float32", DType::F32}, {"float16", DType::F16}, {"bfloat16", DType::BF16},
      {"float64", DType::F64}, {"int32", DType::I32},   {"int64", DType::I64},
      {"int8", DType::I8},     {"uint8", DType::U8},    {"bool", DType::Bool}};
  auto it = names.find(torch_name);
  LUM_CHECK(it != names.end()) << "unknown dtype " << torch_name;
  return it->second;
}

const std::unordered_map<std::string, Builder>& registry() {
  static const std::unordered_map<std::string, Builder> ops = {
      // binary
      {"add", [](Graph&, const In& x, const Params&) { return x[0] + x[1]; }},
      {"sub", [](Graph&, const In& x, const Params&) { return x[0] - x[1]; }},
      {"mul", [](Graph&, const In& x, const Params&) { return x[0] * x[1]; }},
      {"div", [](Graph&, const In& x, const Params&) { return x[0] / x[1]; }},
      {"remainder", [](Graph&, const In& x, const Params&) { return x[0] % x[1]; }},
      {"fmod", [](Graph&, const In& x, const Params&) { return fmod(x[0], x[1]); }},
      {"maximum", [](Graph&, const In& x, const Params&) { return x[0].maximum(x[1]); }},
      {"minimum", [](Graph&, const In& x, const Params&) { return x[0].minimum(x[1]); }},
      {"pow", [](Graph&, const In& x, const Params&) { return x[0].pow(x[1]); }},
      {"lt", [](Graph&, const In& x, const Params&) { return lt(x[0], x[1]); }},
      {"le", [](Graph&, const In& x, const Params&) { return le(x[0], x[1]); }},
      {"gt", [](Graph&, const In& x, const Params&) { return gt(x[0], x[1]); }},
      {"ge", [](Graph&, const In& x, const Params&) { return ge(x[0], x[1]); }},
      {"eq", [](Graph&, const In& x, const Params&) { return eq(x[0], x[1]); }},
      {"ne", [](Graph&, const In& x, const Params&) { return ne(x[0], x[1]); }},
      {"logical_and", [](Graph&, const In& x, const Params&) { return logical_and(x[0], x[1]); }},
      {"logical_or", [](Graph&, const In& x, const Params&) { return logical_or(x[0], x[1]); }},
      {"logical_not", [](Graph&, const In& x, const Params&) { return x[0].logical_not(); }},
      {"where", [](Graph&, const In& x, const Params&) { return where(x[0], x[1], x[2]); }},
      {"add_scalar", [](Graph&, const In& x, const Params& p) { return x[0] + p.f("s"); }},
      {"rsub_scalar", [](Graph&, const In& x, const Params& p) { return p.f("s") - x[0]; }},
      {"mul_scalar", [](Graph&, const In& x, const Params& p) { return x[0] * p.f("s"); }},
      {"div_scalar", [](Graph&, const In& x, const Params& p) { return x[0] / p.f("s"); }},
      {"rdiv_scalar", [](Graph&, const In& x, const Params& p) { return p.f("s") / x[0]; }},
      {"pow_scalar", [](Graph&, const In& x, const Params& p) { return x[0].pow(p.f("e")); }},
      // unary
      {"neg", [](Graph&, const In& x, const Params&) { return -x[0]; }},
      {"reciprocal", [](Graph&, const In& x, const Params&) { return x[0].recip(); }},
      {"square", [](Graph&, const In& x, const Params&) { return x[0].square(); }},
      {"sqrt", [](Graph&, const In& x, const Params&) { return x[0].sqrt(); }},
      {"rsqrt", [](Graph&, const In& x, const Params&) { return x[0].rsqrt(); }},
      {"abs", [](Graph&, const In& x, const Params&) { return x[0].abs(); }},
      {"sign", [](Graph&, const In& x, const Params&) { return x[0].sign(); }},
      {"exp", [](Graph&, const In& x, const Params&) { return x[0].exp(); }},
      {"exp2", [](Graph&, const In& x, const Params&) { return x[0].exp2(); }},
      {"log", [](Graph&, const In& x, const Params&) { return x[0].log(); }},
      {"log2", [](Graph&, const In& x, const Params&) { return x[0].log2(); }},
      {"sin", [](Graph&, const In& x, const Params&) { return x[0].sin(); }},
      {"cos", [](Graph&, const In& x, const Params&) { return x[0].cos(); }},
      {"relu", [](Graph&, const In& x, const Params&) { return x[0].relu(); }},
      {"leaky_relu", [](Graph&, const In& x, const Params& p) { return x[0].leaky_relu(p.f("slope")); }},
      {"sigmoid", [](Graph&, const In& x, const Params&) { return x[0].sigmoid(); }},
      {"tanh", [](Graph&, const In& x, const Params&) { return x[0].tanh(); }},
      {"silu", [](Graph&, const In& x, const Params&) { return x[0].silu(); }},
      {"gelu", [](Graph&, const In& x, const Params&) { return x[0].gelu(); }},
      {"gelu_tanh", [](Graph&, const In& x, const Params&) { return x[0].gelu_tanh(); }},
      {"erf", [](Graph&, const In& x, const Params&) { return x[0].erf(); }},
      {"softplus",
       [](Graph&, const In& x, const Params& p) { return x[0].softplus(p.f("beta"), p.f("threshold")); }},
      {"clamp", [](Graph&, const In& x, const Params& p) { return x[0].clamp(p.f("lo"), p.f("hi")); }},
      {"floor", [](Graph&, const In& x, const Params&) { return x[0].floor(); }},
      {"ceil", [](Graph&, const In& x, const Params&) { return x[0].ceil(); }},
      {"round", [](Graph&, const In& x, const Params&) { return x[0].round(); }},
      {"cast", [](Graph&, const In& x, const Params& p) { return x[0].cast(dtype_named(p.str("to"))); }},
      // reductions
      {"sum", [](Graph&, const In& x, const Params& p) { return x[0].sum(axes(p), keepdim(p)); }},
      {"max", [](Graph&, const In& x, const Params& p) { return x[0].max(axes(p), keepdim(p)); }},
      {"min", [](Graph&, const In& x, const Params& p) { return x[0].min(axes(p), keepdim(p)); }},
      {"mean", [](Graph&, const In& x, const Params& p) { return x[0].mean(axes(p), keepdim(p)); }},
      {"prod", [](Graph&, const In& x, const Params& p) { return x[0].prod(axes(p), keepdim(p)); }},
      {"var",
       [](Graph&, const In& x, const Params& p) { return x[0].var(axes(p), p.i("correction"), keepdim(p)); }},
      {"std",
       [](Graph&, const In& x, const Params& p) { return x[0].std(axes(p), p.i("correction"), keepdim(p)); }},
      {"argmax", [](Graph&, const In& x, const Params& p) { return x[0].argmax(axis(p), keepdim(p)); }},
      {"argmin", [](Graph&, const In& x, const Params& p) { return x[0].argmin(axis(p), keepdim(p)); }},
      // normalisation
      {"softmax", [](Graph&, const In& x, const Params& p) { return x[0].softmax(axis(p)); }},
      {"log_softmax", [](Graph&, const In& x, const Params& p) { return x[0].log_softmax(axis(p)); }},
      {"layer_norm",
       [](Graph&, const In& x, const Params& p) {
         std::vector<int> last;
         for (int64_t d = p.i("dims"); d > 0; --d) last.push_back(-static_cast<int>(d));
         return x[0].layer_norm(last, p.f("eps"));
       }},
      {"layer_norm_affine",
       [](Graph&, const In& x, const Params& p) { return x[0].layer_norm({-1}, p.f("eps")) * x[1] + x[2]; }},
      {"rms_norm",
       [](Graph&, const In& x, const Params& p) {
         std::vector<int> last;
         for (int64_t d = p.i("dims"); d > 0; --d) last.push_back(-static_cast<int>(d));
         return x[0].rms_norm(last, p.f("eps"));
       }},
      {"mean_norm", [](Graph&, const In& x, const Params& p) { return x[0].mean_norm(axes(p)); }},
      {"std_norm", [](Graph&, const In& x, const Params& p) { return x[0].std_norm(axes(p), p.f("eps")); }},
      {"normalize", [](Graph&, const In& x, const Params& p) { return x[0].normalize(p.f("p"), axis(p)); }},
      // movement
      {"permute", [](Graph&, const In& x, const Params& p) { return x[0].permute(axes(p)); }},
      {"transpose",
       [](Graph&, const In& x, const Params& p) {
         return x[0].transpose(static_cast<int>(p.i("a")), static_cast<int>(p.i("b")));
       }},
      {"reshape", [](Graph&, const In& x, const Params& p) { return x[0].reshape(shape(p)); }},
      {"flatten",
       [](Graph&, const In& x, const Params& p) {
         return x[0].flatten(static_cast<int>(p.i("start")), static_cast<int>(p.i("end")));
       }},
      {"unsqueeze", [](Graph&, const In& x, const Params& p) { return x[0].unsqueeze(axis(p)); }},
      {"squeeze",
       [](Graph&, const In& x, const Params& p) { return p.has("axis") ? x[0].squeeze(axis(p)) : x[0].squeeze(); }},
      {"broadcast_to", [](Graph&, const In& x, const Params& p) { return x[0].broadcast_to(shape(p)); }},
      {"narrow",
       [](Graph&, const In& x, const Params& p) { return x[0].narrow(axis(p), p.i("start"), p.i("length")); }},
      {"pad", [](Graph&, const In& x, const Params& p) { return pad_like_torch(x[0], p); }},
      {"concat", [](Graph&, const In& x, const Params& p) { return concat(x, axis(p)); }},
      {"stack", [](Graph&, const In& x, const Params& p) { return stack(x, axis(p)); }},
      {"split",
       [](Graph&, const In& x, const Params& p) { return x[0].split(p.i("size"), axis(p)).at(p.i("part")); }},
      {"chunk",
       [](Graph&, const In& x, const Params& p) { return x[0].chunk(p.i("chunks"), axis(p)).at(p.i("part")); }},
      {"index_select", [](Graph&, const In& x, const Params& p) { return x[0].index_select(axis(p), x[1]); }},
      {"gather", [](Graph&, const In& x, const Params& p) { return x[0].gather_axis(axis(p), x[1]); }},
      {"scatter", [](Graph&, const In& x, const Params& p) { return x[0].scatter_axis(axis(p), x[1], x[2]); }},
      {"repeat", [](Graph&, const In& x, const Params& p) { return x[0].repeat(shape(p, "times")); }},
      {"flip", [](Graph&, const In& x, const Params& p) { return x[0].flip(axis(p)); }},
      {"roll", [](Graph&, const In& x, const Params& p) { return x[0].roll(p.i("shift"), axis(p)); }},
      {"tril", [](Graph&, const In& x, const Params& p) { return x[0].tril(p.i("k")); }},
      {"triu", [](Graph&, const In& x, const Params& p) { return x[0].triu(p.i("k")); }},
      {"diagonal", [](Graph&, const In& x, const Params& p) { return x[0].diagonal(p.i("k")); }},
      // creation
      {"full", [](Graph& g, const In&, const Params& p) { return g.full(shape(p), p.f("value")); }},
      {"arange",
       [](Graph& g, const In&, const Params& p) { return g.arange(p.f("start"), p.f("end"), p.f("step")); }},
      {"arange_int",
       [](Graph& g, const In&, const Params& p) {
         return g.arange(p.f("start"), p.f("end"), p.f("step"), DType::I32);
       }},
      {"eye", [](Graph& g, const In&, const Params& p) { return g.eye(p.i("n")); }},
      {"zeros_like", [](Graph&, const In& x, const Params&) { return x[0].zeros_like(); }},
      {"ones_like", [](Graph&, const In& x, const Params&) { return x[0].ones_like(); }},
      // cumulative
      {"cumsum", [](Graph&, const In& x, const Params& p) { return x[0].cumsum(axis(p)); }},
      {"cumprod", [](Graph&, const In& x, const Params& p) { return x[0].cumprod(axis(p)); }},
      {"cummax", [](Graph&, const In& x, const Params& p) { return x[0].cummax(axis(p)); }},
      // linear algebra
      {"matmul", [](Graph&, const In& x, const Params&) { return x[0].matmul(x[1]); }},
      {"dot", [](Graph&, const In& x, const Params&) { return x[0].dot(x[1]); }},
      {"outer", [](Graph&, const In& x, const Params&) { return x[0].outer(x[1]); }},
      // convolution and pooling
      {"conv1d",
       [](Graph&, const In& x, const Params& p) {
         return conv1d(x[0], x[1], x.size() > 2 ? x[2] : Tensor(), conv_options(p));
       }},
      {"conv2d",
       [](Graph&, const In& x, const Params& p) {
         return conv2d(x[0], x[1], x.size() > 2 ? x[2] : Tensor(), conv_options(p));
       }},
      {"max_pool1d", [](Graph&, const In& x, const Params& p) { return max_pool1d(x[0], pool_options(p)); }},
      {"max_pool2d", [](Graph&, const In& x, const Params& p) { return max_pool2d(x[0], pool_options(p)); }},
      {"avg_pool1d", [](Graph&, const In& x, const Params& p) { return avg_pool1d(x[0], pool_options(p)); }},
      {"avg_pool2d", [](Graph&, const In& x, const Params& p) { return avg_pool2d(x[0], pool_options(p)); }},
      {"conv3d",
       [](Graph&, const In& x, const Params& p) {
         return conv3d(x[0], x[1], x.size() > 2 ? x[2] : Tensor(), conv_options(p));
       }},
      {"max_pool3d", [](Graph&, const In& x, const Params& p) { return max_pool3d(x[0], pool_options(p)); }},
      {"avg_pool3d", [](Graph&, const In& x, const Params& p) { return avg_pool3d(x[0], pool_options(p)); }},
  };
  return ops;
}

}  // namespace

Tensor build_op(Graph& cx, const std::string& op, const std::vector<Tensor>& in, const Params& p) {
  auto it = registry().find(op);
  LUM_CHECK(it != registry().end()) << "no luminal op registered for fixture op '" << op << "'";
  return it->second(cx, in, p);
}

}  // namespace luminal::testing
