// AppendRows: the builder and the reference semantics (the concatenation).
#include "luminal/append_rows_op.hpp"

#include <cstring>

#include "luminal/error.hpp"
#include "luminal/graph.hpp"
#include "luminal/tensor.hpp"

namespace luminal {

Tensor append_rows(const Tensor& base, const Tensor& rows) {
  LUM_CHECK(&base.graph() == &rows.graph()) << "append_rows: tensors of different graphs";
  LUM_CHECK(base.rank() >= 1 && base.rank() == rows.rank() && base.dtype() == rows.dtype())
      << "append_rows: " << to_string(rows.shape()) << " " << dtype_name(rows.dtype())
      << " rows do not fit " << to_string(base.shape()) << " " << dtype_name(base.dtype());
  std::vector<Expr> shape = base.shape();
  for (size_t d = 1; d < shape.size(); ++d)
    LUM_CHECK(shape[d] == rows.shape()[d]) << "append_rows: rows " << to_string(rows.shape())
                                           << " do not match " << to_string(base.shape());
  shape[0] = shape[0] + rows.shape()[0];
  Node n;
  n.op = Op::Custom;
  n.custom = std::make_shared<AppendRowsOp>();
  n.dtype = base.dtype();
  n.shape = shape;
  n.inputs = {Edge{base.id(), base.view()}, Edge{rows.id(), rows.view()}};
  Graph& g = base.graph();
  return g.tensor_of(g.add_node(std::move(n)));
}

Buffer AppendRowsOp::run(const std::vector<Buffer>& inputs, const std::vector<std::vector<int64_t>>&,
                         const std::vector<int64_t>& out_shape, DType out_dtype) const {
  LUM_CHECK(inputs.size() == 2) << "AppendRows: expects two inputs";
  size_t numel = 1;
  for (int64_t d : out_shape) numel *= static_cast<size_t>(d);
  LUM_CHECK(inputs[0].numel() + inputs[1].numel() == numel && inputs[0].dtype() == out_dtype &&
            inputs[1].dtype() == out_dtype)
      << "AppendRows: inputs do not add up to the output";
  Buffer out(out_dtype, numel, Buffer::Uninitialized{});
  auto* dst = static_cast<std::byte*>(out.data());
  if (inputs[0].bytes()) std::memcpy(dst, inputs[0].data(), inputs[0].bytes());
  if (inputs[1].bytes()) std::memcpy(dst + inputs[0].bytes(), inputs[1].data(), inputs[1].bytes());
  return out;
}

}  // namespace luminal
