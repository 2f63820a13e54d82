// The public API in one include.
#pragma once

#include "luminal/backend.hpp"
#include "luminal/buffer.hpp"
#include "luminal/collective.hpp"
#include "luminal/cpu.hpp"
#include "luminal/cuda.hpp"
#include "luminal/dtype.hpp"
#include "luminal/error.hpp"
#include "luminal/expr.hpp"
#include "luminal/graph.hpp"
#include "luminal/op.hpp"
#include "luminal/reference.hpp"
#include "luminal/tensor.hpp"
#include "luminal/view.hpp"
