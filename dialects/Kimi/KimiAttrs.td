//===- KimiAttrs.td - attributes and enums of kimi ---------*- tablegen -*-===//

#ifndef KIMI_ATTRS_TD
#define KIMI_ATTRS_TD

include "dialects/Kimi/KimiDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def Kimi_DiagStrategy : I32EnumAttr<"DiagStrategy",
    "how the diagonal tiles of chunked KDA are computed", [
      I32EnumAttrCase<"dense", 0>,
      I32EnumAttrCase<"pairwise", 1>
    ]> {
  let cppNamespace = "::kimi";
  let genSpecializedAttr = 0;
}

def Kimi_GateForm : I32EnumAttr<"GateForm", "form of the KDA forget gate", [
      I32EnumAttrCase<"lower_bound", 0>,
      I32EnumAttrCase<"softplus", 1>
    ]> {
  let cppNamespace = "::kimi";
}

def Kimi_GluActivation : I32EnumAttr<"GluActivation",
    "activation of a gated linear unit", [
      I32EnumAttrCase<"situ", 0>,
      I32EnumAttrCase<"silu", 1>
    ]> {
  let cppNamespace = "::kimi";
}

//===----------------------------------------------------------------------===//
// #kimi.decay
//===----------------------------------------------------------------------===//

def Kimi_DecayAttr : AttrDef<Kimi_Dialect, "Decay"> {
  let mnemonic = "decay";
  let summary = "proven decay bound and chosen chunking of a kimi.kda op";
  let description = [{
    Records what the decay-bound proof established about the per-step log
    decay `g` of a `kimi.kda` op and how the op is chunked:

    * `lower`: a proven lower bound `L <= 0` with `g >= L` (absent when
      nothing was proven),
    * `chunk`: the chunk length `C`, a power of two in `[16, 64]`,
    * `diag`: `dense` when the diagonal tiles are computed as rescaled dense
      matmuls (needs `C * |L| * log2(e)` below the operand type's exponent
      headroom), `pairwise` when they are computed pair by pair in log space.

    ```mlir
    #kimi.decay<lower = -5.0, chunk = 16, diag = dense>
    #kimi.decay<chunk = 64, diag = pairwise>
    ```
  }];
  let parameters = (ins
    OptionalParameter<"::mlir::FloatAttr">:$lower,
    "int64_t":$chunk,
    "::kimi::DiagStrategy":$diag);
  let builders = [
    AttrBuilder<(ins "std::optional<double>":$lower, "int64_t":$chunk,
                     "::kimi::DiagStrategy":$diag), [{
      ::mlir::FloatAttr lowerAttr;
      if (lower)
        lowerAttr = ::mlir::FloatAttr::get(
            ::mlir::Float64Type::get($_ctxt), *lower);
      return $_get($_ctxt, lowerAttr, chunk, diag);
    }]>
  ];
  let extraClassDeclaration = [{
    /// The proven lower bound as a double, if any.
    std::optional<double> getLowerBound() const {
      if (::mlir::FloatAttr lower = getLower())
        return lower.getValueAsDouble();
      return std::nullopt;
    }
  }];
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

//===----------------------------------------------------------------------===//
// #kimi.interval
//===----------------------------------------------------------------------===//

def Kimi_IntervalAttr : AttrDef<Kimi_Dialect, "Interval"> {
  let mnemonic = "interval";
  let summary = "a proven interval of real values";
  let description = [{
    An interval that encloses every element of a float value, as proven by
    the decay-bound analysis (`kimi-prove-decay-bounds` attaches the interval
    of each `kimi.kda` gate as `kimi.decay_interval`). Each end is a bound,
    closed unless marked `open`; an absent end is unbounded.

    ```mlir
    #kimi.interval<lower = -5.0, upper = 0.0>            // [-5, 0]
    #kimi.interval<lower = -5.0 open, upper = 0.0 open>  // (-5, 0)
    #kimi.interval<upper = 0.0>                          // (-inf, 0]
    #kimi.interval<>                                     // (-inf, +inf)
    ```
  }];
  let parameters = (ins
    OptionalParameter<"::mlir::FloatAttr">:$lower,
    OptionalParameter<"::mlir::FloatAttr">:$upper,
    "bool":$lowerOpen,
    "bool":$upperOpen);
  let builders = [
    AttrBuilder<(ins "std::optional<double>":$lower, "bool":$lowerOpen,
                     "std::optional<double>":$upper, "bool":$upperOpen), [{
      ::mlir::Type f64 = ::mlir::Float64Type::get($_ctxt);
      ::mlir::FloatAttr lowerAttr, upperAttr;
      if (lower)
        lowerAttr = ::mlir::FloatAttr::get(f64, *lower);
      if (upper)
        upperAttr = ::mlir::FloatAttr::get(f64, *upper);
      return $_get($_ctxt, lowerAttr, upperAttr, lower && lowerOpen,
                   upper && upperOpen);
    }]>
  ];
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

#endif // KIMI_ATTRS_TD
