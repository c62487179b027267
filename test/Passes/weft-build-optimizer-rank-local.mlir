// RUN: weft-opt %s -split-input-file -weft-build-optimizer="rank-local=true max-grad-norm=1.0" -verify-diagnostics | FileCheck %s
// RUN: weft-opt %s -split-input-file -weft-build-optimizer="rank-local=true stored-over=dp" -weft-optimize-collectives -verify-diagnostics | FileCheck %s --check-prefix=STORED

// The step each rank runs on a partitioned module. `w` (global 8x8, split
// over tp) comes reduce-scattered over dp from the step's reduction (ZeRO):
// its state is the rank's 2x8 block, the parameter comes in as the rank
// holds it (4x8), is cut to the block over dp, updated, and gathered back.
// `b` is reduced whole: parameter, gradient and state are the same 8 values
// on every rank. `c` is not reduced (split over tp in the step). The norm
// sums the squares per group of axes the blocks are split over and
// all-reduces each group over its axes: none for `b`, dp x tp for `w`, tp
// for `c`.
weft.mesh @mesh(dp = 2, tp = 2)
// CHECK-LABEL: func.func @optimizer_step
// CHECK-SAME: (%[[DIV:[^:]*]]: tensor<f32> {weft.local_sharding = #weft.sharding<@mesh, []>, weft.optimizer_slot = {role = "grad_divisor"}},
// CHECK-SAME: %[[W:[^:]*]]: tensor<4x8xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[}}[tp], []]>, weft.optimizer_slot = {parameter = "w", role = "param"}},
// CHECK-SAME: %[[GW:[^:]*]]: tensor<2x8xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[}}[tp, dp], []]>, weft.optimizer_slot = {parameter = "w", role = "grad"}},
// CHECK-SAME: %[[MW:[^:]*]]: tensor<2x8xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[}}[tp, dp], []]>, weft.optimizer_slot = {parameter = "w", role = "exp_avg"}},
// CHECK-SAME: %[[B:[^:]*]]: tensor<8xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[}}[]]>, weft.optimizer_slot = {parameter = "b", role = "param"}},
// CHECK-SAME: %[[C:[^:]*]]: tensor<2xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[}}[tp]]>, weft.optimizer_slot = {parameter = "c", role = "param"}},
// CHECK-SAME: -> (tensor<f32> {weft.local_sharding = #weft.sharding<@mesh, []>, weft.optimizer_slot = {role = "grad_norm"}}, tensor<4x8xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[}}[tp], []]>, weft.optimizer_slot = {parameter = "w", role = "param"}}, tensor<2x8xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[}}[tp, dp], []]>, weft.optimizer_slot = {parameter = "w", role = "exp_avg"}},
// CHECK: %[[GWD:.*]] = weft.div %[[GW]], %[[DIV]]
// CHECK: %[[SW:.*]] = weft.reduce_sum %{{.*}} axes [0, 1] : tensor<2x8xf32> -> tensor<f32>
// CHECK: %[[SB:.*]] = weft.reduce_sum %{{.*}} axes [0] : tensor<8xf32> -> tensor<f32>
// CHECK: %[[SC:.*]] = weft.reduce_sum %{{.*}} axes [0] : tensor<2xf32> -> tensor<f32>
// CHECK-NOT: weft.reduce_sum
// CHECK: %[[RW:.*]] = weft.all_reduce sum %[[SW]] over @mesh ["dp", "tp"] : tensor<f32>
// CHECK: %[[T1:.*]] = weft.add %[[SB]], %[[RW]]
// CHECK: %[[RC:.*]] = weft.all_reduce sum %[[SC]] over @mesh ["tp"] : tensor<f32>
// CHECK: %[[T2:.*]] = weft.add %[[T1]], %[[RC]]
// CHECK: %[[NORM:.*]] = weft.sqrt %[[T2]]
// CHECK: weft.minimum
// CHECK: %[[PB:.*]] = weft.all_slice %[[W]] over @mesh ["dp"] dim 0 : tensor<4x8xf32> -> tensor<2x8xf32>
// CHECK: %[[DEC:.*]] = weft.mul %[[PB]], %{{.*}} : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
// CHECK: %[[NEWB:.*]] = weft.sub %[[DEC]], %{{.*}} : tensor<2x8xf32>
// CHECK: %[[NEW:.*]] = weft.all_gather %[[NEWB]] over @mesh ["dp"] dim 0 : tensor<2x8xf32> -> tensor<4x8xf32>
// CHECK-NOT: weft.all_slice
// CHECK-NOT: weft.all_gather
// CHECK: return %[[NORM]], %[[NEW]],
func.func @step(%gw: tensor<4x8xf32>, %gb: tensor<8xf32>, %gc: tensor<2xf32>)
    -> (tensor<4x8xf32> {weft.gradient_of = "w", weft.local_sharding = #weft.sharding<@mesh, [["tp"], []], partial = ["dp"]>},
        tensor<8xf32> {weft.gradient_of = "b", weft.local_sharding = #weft.sharding<@mesh, [[]], partial = ["dp"]>},
        tensor<2xf32> {weft.gradient_of = "c", weft.local_sharding = #weft.sharding<@mesh, [["tp"]]>})
    attributes {weft.gradient_reduction = @step_reduce_gradients} {
  return %gw, %gb, %gc : tensor<4x8xf32>, tensor<8xf32>, tensor<2xf32>
}
func.func @step_reduce_gradients(
    %gw: tensor<4x8xf32> {weft.local_sharding = #weft.sharding<@mesh, [["tp"], []], partial = ["dp"]>},
    %gb: tensor<8xf32> {weft.local_sharding = #weft.sharding<@mesh, [[]], partial = ["dp"]>})
    -> (tensor<2x8xf32> {weft.gradient_of = "w", weft.local_sharding = #weft.sharding<@mesh, [["tp", "dp"], []]>},
        tensor<8xf32> {weft.gradient_of = "b", weft.local_sharding = #weft.sharding<@mesh, [[]]>}) {
  %rw = weft.reduce_scatter sum %gw over @mesh ["dp"] dim 0 : tensor<4x8xf32> -> tensor<2x8xf32>
  %rb = weft.all_reduce sum %gb over @mesh ["dp"] : tensor<8xf32>
  return %rw, %rb : tensor<2x8xf32>, tensor<8xf32>
}

// -----

// A gradient that is still a partial sum and that no reduction function
// reduces cannot be updated on a rank.
weft.mesh @mesh(dp = 2)
// expected-error @+1 {{the gradient of 'w' (result #0) is a partial sum ([[], []] partial=[dp]) that no reduction function (weft.gradient_reduction) reduces: a rank-local optimizer step takes reduced gradients}}
func.func @unreduced(%gw: tensor<4x8xf32>)
    -> (tensor<4x8xf32> {weft.gradient_of = "w", weft.local_sharding = #weft.sharding<@mesh, [[], []], partial = ["dp"]>}) {
  return %gw : tensor<4x8xf32>
}

// -----

// ZeRO-3 (stored-over=dp): a parameter comes and goes as -weft-shard-parameters
// stores it, its rows split over dp. `w`'s gradient is reduce-scattered on the
// same rows: after -weft-optimize-collectives the update needs no collective.
// `c`'s gradient comes whole (reduced in the step): its stored half is
// gathered, updated whole, and cut back. `b`'s 3 rows are not stored.
weft.mesh @mesh(dp = 2)
// STORED-LABEL: func.func @step(%{{[^:]*}}: tensor<8x4xf32>
// STORED: func.func @optimizer_step
// STORED-SAME: %[[W:[^:]*]]: tensor<4x4xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[\[}}dp], []]>, weft.optimizer_slot = {parameter = "w", role = "param"}}
// STORED-SAME: %[[C:[^:]*]]: tensor<2xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[\[}}dp]]>, weft.optimizer_slot = {parameter = "c", role = "param"}}
// STORED-SAME: tensor<3xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[\[}}]]>, weft.optimizer_slot = {parameter = "b", role = "param"}}
// STORED-SAME: -> (tensor<f32> {{.*}}, tensor<4x4xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[\[}}dp], []]>, weft.optimizer_slot = {parameter = "w", role = "param"}}
// STORED-NOT: weft.all_gather %[[W]]
// STORED: %[[CF:.*]] = weft.all_gather %[[C]] over @mesh ["dp"] dim 0 : tensor<2xf32> -> tensor<4xf32>
// STORED: weft.mul %[[CF]], %{{.*}} : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
// STORED: %[[CB:.*]] = weft.all_slice %{{.*}} over @mesh ["dp"] dim 0 : tensor<4xf32> -> tensor<2xf32>
// STORED-NOT: weft.all_gather
// STORED: return %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[CB]],
func.func @step(%gw: tensor<8x4xf32>, %gc: tensor<4xf32>, %gb: tensor<3xf32>)
    -> (tensor<8x4xf32> {weft.gradient_of = "w", weft.local_sharding = #weft.sharding<@mesh, [[], []], partial = ["dp"]>},
        tensor<4xf32> {weft.gradient_of = "c", weft.local_sharding = #weft.sharding<@mesh, [[]]>},
        tensor<3xf32> {weft.gradient_of = "b", weft.local_sharding = #weft.sharding<@mesh, [[]]>})
    attributes {weft.gradient_reduction = @step_reduce_gradients} {
  return %gw, %gc, %gb : tensor<8x4xf32>, tensor<4xf32>, tensor<3xf32>
}
func.func @step_reduce_gradients(
    %gw: tensor<8x4xf32> {weft.local_sharding = #weft.sharding<@mesh, [[], []], partial = ["dp"]>})
    -> (tensor<4x4xf32> {weft.gradient_of = "w", weft.local_sharding = #weft.sharding<@mesh, [["dp"], []]>}) {
  %rw = weft.reduce_scatter sum %gw over @mesh ["dp"] dim 0 : tensor<8x4xf32> -> tensor<4x4xf32>
  return %rw : tensor<4x4xf32>
}

// -----

// A weight the step stores in blocks (weft.stored_over, which the
// partitioned weight keeps: AxoNN's depth axis gz) comes and goes as that
// block, ZeRO or not: `w`'s gradient is reduce-scattered into it, and the
// update needs no collective (after -weft-optimize-collectives); `c` is
// not stored.
weft.mesh @mesh(gz = 2)
// STORED-LABEL: func.func @depth(
// STORED: func.func @optimizer_step
// STORED-SAME: tensor<2x4xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[\[}}gz], []]>, weft.optimizer_slot = {parameter = "w", role = "param"}}
// STORED-SAME: tensor<4xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[\[}}]]>, weft.optimizer_slot = {parameter = "c", role = "param"}}
// STORED-NOT: weft.all_slice
// STORED: return
func.func @depth(%x: tensor<4x4xf32>, %gc: tensor<4xf32>)
    -> (tensor<4x4xf32> {weft.gradient_of = "w", weft.local_sharding = #weft.sharding<@mesh, [[], []], partial = ["gz"]>},
        tensor<4xf32> {weft.gradient_of = "c", weft.local_sharding = #weft.sharding<@mesh, [[]]>})
    attributes {weft.gradient_reduction = @depth_reduce_gradients} {
  %w = weft.parameter "w" {weft.stored_over = ["gz"]} : tensor<4x4xf32>
  %c = weft.parameter "c" : tensor<4xf32>
  return %x, %gc : tensor<4x4xf32>, tensor<4xf32>
}
func.func @depth_reduce_gradients(
    %gw: tensor<4x4xf32> {weft.local_sharding = #weft.sharding<@mesh, [[], []], partial = ["gz"]>})
    -> (tensor<2x4xf32> {weft.gradient_of = "w", weft.local_sharding = #weft.sharding<@mesh, [["gz"], []]>}) {
  %rw = weft.reduce_scatter sum %gw over @mesh ["gz"] dim 0 : tensor<4x4xf32> -> tensor<2x4xf32>
  return %rw : tensor<2x4xf32>
}
