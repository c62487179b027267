//===- Partition.h - What an op's partition method works with ---*- C++ -*-===//
//
// Part of the Weft project.
//
// `-weft-partition` rewrites a sharded program into the program every rank
// runs by asking each op to partition itself
// (ShardingRuleOpInterface::partition), as upstream's ShardingInterface does.
// The op sees the pass through PartitionState: the mesh, a builder at the
// place where the rank program is being built, the shardings that the plan
// wants and that values have, and resharding (which inserts collectives).
// Most ops use the generic partition by their factor rule; ops whose
// partitioned form is a different algorithm (ring attention, vocabulary-
// parallel embedding and cross-entropy) implement it themselves.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_DIALECT_PARTITION_H
#define WEFT_DIALECT_PARTITION_H

#include "weft/Dialect/Sharding.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

#include <tuple>

namespace weft {

class PartitionState {
public:
  virtual ~PartitionState();

  /// Where the rank program is being built: new ops go here.
  virtual mlir::OpBuilder &builder() = 0;
  virtual const MeshInfo &mesh() const = 0;
  /// The sharding the plan wants for global value `global` (its annotation
  /// or propagated sharding; replicated if none).
  virtual TensorSharding target(mlir::Value global) = 0;
  /// The sharding the local value of `global` has in the rank program.
  virtual const TensorSharding &actual(mlir::Value global) = 0;
  /// The local value of `global` in sharding `want`: resharded with
  /// collectives where needed, each (value, sharding) made once.
  virtual mlir::Value operand(mlir::Location loc, mlir::Value global,
                              const TensorSharding &want) = 0;
  /// Reshards local value `local` from sharding `from` to `to`.
  virtual mlir::Value reshard(mlir::Location loc, mlir::Value local,
                              TensorSharding from,
                              const TensorSharding &to) = 0;
  /// Records that global value `global` is `local` on every rank, with
  /// sharding `sharding`.
  virtual void setResult(mlir::Value global, mlir::Value local,
                         TensorSharding sharding) = 0;
  /// True if a dimension split over `axes` uses the load-balanced (zigzag)
  /// layout of ring attention (its major axis is a load-balanced ring).
  virtual bool isZigzag(llvm::ArrayRef<std::string> axes) = 0;

  /// What a ring attention's forward keeps for its backward ring: the
  /// rank's output, and each local query row's log-sum-exp over all keys
  /// (f32), local values with their shardings. Keyed by the global q, k and
  /// v it attended, which weft.attention_grad reads (a layer's partition
  /// carries the statistics from a forward layer to its backward layer).
  struct RingStatistics {
    mlir::Value out;
    TensorSharding outSharding;
    mlir::Value lse;
    TensorSharding lseSharding;
  };
  llvm::DenseMap<std::tuple<mlir::Value, mlir::Value, mlir::Value>,
                 RingStatistics>
      ringStatistics;

  // Helpers for partition methods.
  mlir::FlatSymbolRefAttr meshRef();
  mlir::ArrayAttr axesAttr(llvm::ArrayRef<std::string> axes);
  /// The unit attribute of a zigzag split over `axes`, or null.
  mlir::UnitAttr zigzagAttr(llvm::ArrayRef<std::string> axes);
  /// The per-rank type of global value `global` under `sharding`.
  mlir::RankedTensorType localType(mlir::Value global,
                                   const TensorSharding &sharding);
  /// A scalar constant of `elementType`.
  mlir::Value constant(mlir::Location loc, mlir::Type elementType,
                       double value);
  /// A vector with one entry per rank of the group over `axes`, sliced to
  /// this rank's entry: a rank-dependent constant without a rank op.
  mlir::Value perRank(mlir::Location loc, llvm::ArrayRef<int64_t> values,
                      llvm::ArrayRef<std::string> axes, mlir::Type elementType);
};

/// The generic partition by an op's factor rule: operands resharded to what
/// the factors' axes give them (weights keep the plan's splits), the op
/// cloned on local shapes, split reduction factors leaving partial sums.
/// Returns the local op.
mlir::FailureOr<mlir::Operation *> partitionByFactorRule(mlir::Operation *op,
                                                         PartitionState &state);

/// Parameters, constants and iotas are built whole on every rank, which then
/// keeps its shard (an all_slice that the emitters turn into reading only the
/// shard of a weight file).
mlir::LogicalResult partitionWhole(mlir::Operation *op, PartitionState &state);

} // namespace weft

#endif // WEFT_DIALECT_PARTITION_H
