// RUN: weft-opt %s -split-input-file -weft-build-optimizer -verify-diagnostics | FileCheck %s
// RUN: weft-opt %s -split-input-file -weft-build-optimizer="optimizer=sgd momentum=0.5 weight-decay=0.1 max-grad-norm=1.0 freeze=^b$" -verify-diagnostics | FileCheck %s --check-prefix=SGD
// RUN: weft-opt %s -split-input-file -weft-build-optimizer=skip-nonfinite=true -verify-diagnostics | FileCheck %s --check-prefix=SKIP
// RUN: weft-opt %s -split-input-file -weft-build-optimizer=decay=matrices -verify-diagnostics | FileCheck %s --check-prefix=MATRICES
// RUN: weft-opt %s -split-input-file -weft-build-optimizer="optimizer=sgd weight-decay=0.1 decay=matrices" -verify-diagnostics | FileCheck %s --check-prefix=SGDMATRICES
// RUN: not weft-opt %s -split-input-file -weft-build-optimizer=decay=biases 2>&1 | FileCheck %s --check-prefix=BADDECAY

// A training step returning two gradients: AdamW's step takes the step's
// scalars, then each parameter, its summed gradient and its two moments, and
// returns the gradient norm and the new parameter and moments. The gradients
// are divided by the number of micro-batches before the norm; no clipping by
// default.
// CHECK-LABEL: func.func @step
// CHECK-LABEL: func.func @optimizer_step
// CHECK-SAME: (%[[DIV:[^:]*]]: tensor<f32> {weft.optimizer_slot = {role = "grad_divisor"}}, %[[DECAY:[^:]*]]: tensor<f32> {weft.optimizer_slot = {role = "decay_factor"}}, %[[SIZE:[^:]*]]: tensor<f32> {weft.optimizer_slot = {role = "step_size"}}, %[[ROOT:[^:]*]]: tensor<f32> {weft.optimizer_slot = {role = "bias_correction2_sqrt"}},
// CHECK-SAME: %[[W:[^:]*]]: tensor<4x8xf32> {weft.optimizer_slot = {parameter = "w", role = "param"}}, %[[GW:[^:]*]]: tensor<4x8xf32> {weft.optimizer_slot = {parameter = "w", role = "grad"}}, %[[MW:[^:]*]]: tensor<4x8xf32> {weft.optimizer_slot = {parameter = "w", role = "exp_avg"}}, %[[VW:[^:]*]]: tensor<4x8xf32> {weft.optimizer_slot = {parameter = "w", role = "exp_avg_sq"}},
// CHECK-SAME: tensor<8xf32> {weft.optimizer_slot = {parameter = "b", role = "param"}}
// CHECK-SAME: -> (tensor<f32> {weft.optimizer_slot = {role = "grad_norm"}}, tensor<4x8xf32> {weft.optimizer_slot = {parameter = "w", role = "param"}}, tensor<4x8xf32> {weft.optimizer_slot = {parameter = "w", role = "exp_avg"}}, tensor<4x8xf32> {weft.optimizer_slot = {parameter = "w", role = "exp_avg_sq"}}, tensor<8xf32> {weft.optimizer_slot = {parameter = "b", role = "param"}}
// CHECK-SAME: attributes {weft.optimizer = "adamw"}
// CHECK: %[[G:.*]] = weft.div %[[GW]], %[[DIV]] : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK: %[[SQ:.*]] = weft.mul %[[G]], %[[G]]
// CHECK: weft.reduce_sum %[[SQ]] axes [0, 1] : tensor<4x8xf32> -> tensor<f32>
// CHECK: weft.reduce_sum %{{.*}} axes [0] : tensor<8xf32> -> tensor<f32>
// CHECK: %[[TOTAL:.*]] = weft.add
// CHECK: %[[NORM:.*]] = weft.sqrt %[[TOTAL]] : tensor<f32>
// CHECK-NOT: weft.minimum
// CHECK: %[[P:.*]] = weft.mul %[[W]], %[[DECAY]]
// CHECK: %[[B1:.*]] = weft.constant dense<0.100000024> : tensor<f32>
// CHECK: %[[D:.*]] = weft.sub %[[G]], %[[MW]]
// CHECK: %[[DB:.*]] = weft.mul %[[D]], %[[B1]]
// CHECK: %[[M:.*]] = weft.add %[[MW]], %[[DB]]
// CHECK: %[[C2:.*]] = weft.constant dense<9.99987125E-4> : tensor<f32>
// CHECK: %[[CG:.*]] = weft.mul %[[C2]], %[[G]]
// CHECK: %[[GG:.*]] = weft.mul %[[CG]], %[[G]]
// CHECK: %[[B2:.*]] = weft.constant dense<9.990000e-01> : tensor<f32>
// CHECK: %[[VB:.*]] = weft.mul %[[VW]], %[[B2]]
// CHECK: %[[V:.*]] = weft.add %[[VB]], %[[GG]]
// CHECK: %[[R:.*]] = weft.sqrt %[[V]]
// CHECK: %[[EPS:.*]] = weft.constant dense<9.99999993E-9> : tensor<f32>
// CHECK: %[[RR:.*]] = weft.div %[[R]], %[[ROOT]]
// CHECK: %[[DEN:.*]] = weft.add %[[RR]], %[[EPS]]
// CHECK: %[[Q:.*]] = weft.div %[[M]], %[[DEN]]
// CHECK: %[[STEP:.*]] = weft.mul %[[SIZE]], %[[Q]]
// CHECK: %[[NEW:.*]] = weft.sub %[[P]], %[[STEP]]
// The second parameter reuses the constants.
// CHECK-NOT: weft.constant
// CHECK: return %[[NORM]], %[[NEW]], %[[M]], %[[V]],

// Loss scaling (skip-nonfinite): a norm that is not finite (norm - norm is
// not 0) keeps every parameter and moment as it came in.
// SKIP-LABEL: func.func @optimizer_step
// SKIP-SAME: %[[W:[^:]*]]: tensor<4x8xf32> {weft.optimizer_slot = {parameter = "w", role = "param"}}, %{{[^:]*}}: tensor<4x8xf32> {weft.optimizer_slot = {parameter = "w", role = "grad"}}, %[[MW:[^:]*]]: tensor<4x8xf32> {weft.optimizer_slot = {parameter = "w", role = "exp_avg"}}, %[[VW:[^:]*]]: tensor<4x8xf32> {weft.optimizer_slot = {parameter = "w", role = "exp_avg_sq"}},
// SKIP: %[[NORM:.*]] = weft.sqrt
// SKIP: %[[ZERO:.*]] = weft.sub %[[NORM]], %[[NORM]] : tensor<f32>
// SKIP: %[[OK:.*]] = weft.compare eq, %[[ZERO]], %{{.*}} : (tensor<f32>, tensor<f32>) -> tensor<i1>
// SKIP: %[[P:.*]] = weft.where %[[OK]], %{{.*}}, %[[W]] : (tensor<i1>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// SKIP: %[[M:.*]] = weft.where %[[OK]], %{{.*}}, %[[MW]]
// SKIP: %[[V:.*]] = weft.where %[[OK]], %{{.*}}, %[[VW]]
// SKIP: return %[[NORM]], %[[P]], %[[M]], %[[V]],

// decay=matrices: the matrix w decays, the bias b (rank 1) does not, as
// nanoGPT's and Megatron-LM's parameter groups.
// MATRICES-LABEL: func.func @optimizer_step
// MATRICES-SAME: %[[DECAY:[^:]*]]: tensor<f32> {weft.optimizer_slot = {role = "decay_factor"}}
// MATRICES-SAME: %[[W:[^:]*]]: tensor<4x8xf32> {weft.optimizer_slot = {parameter = "w", role = "param"}}
// MATRICES-SAME: %[[B:[^:]*]]: tensor<8xf32> {weft.optimizer_slot = {parameter = "b", role = "param"}}
// MATRICES: weft.mul %[[W]], %[[DECAY]]
// MATRICES-NOT: weft.mul %[[B]], %[[DECAY]]
// MATRICES: weft.sub %[[B]], %{{.*}} : tensor<8xf32>
// MATRICES: return
// SGDMATRICES-LABEL: func.func @optimizer_step
// SGDMATRICES-SAME: %[[W:[^:]*]]: tensor<4x8xf32> {weft.optimizer_slot = {parameter = "w", role = "param"}}
// SGDMATRICES-SAME: %[[B:[^:]*]]: tensor<8xf32> {weft.optimizer_slot = {parameter = "b", role = "param"}}
// SGDMATRICES: weft.mul %{{.*}}, %[[W]] : (tensor<f32>, tensor<4x8xf32>)
// SGDMATRICES-NOT: %[[B]] : (tensor<f32>, tensor<8xf32>)
// SGDMATRICES: return
// BADDECAY: error: -weft-build-optimizer: decay 'biases' is not all or matrices

// SGD with momentum, weight decay, clipping, and `b` frozen: one buffer per
// parameter, the learning rate as the step's scalar, and every gradient
// scaled by min(1, max / (norm + 1e-6)).
// SGD-LABEL: func.func @optimizer_step
// SGD-SAME: (%[[DIV:[^:]*]]: tensor<f32> {weft.optimizer_slot = {role = "grad_divisor"}}, %[[LR:[^:]*]]: tensor<f32> {weft.optimizer_slot = {role = "lr"}}, %[[W:[^:]*]]: tensor<4x8xf32> {weft.optimizer_slot = {parameter = "w", role = "param"}}, %[[GW:[^:]*]]: tensor<4x8xf32> {weft.optimizer_slot = {parameter = "w", role = "grad"}}, %[[BUF:[^:]*]]: tensor<4x8xf32> {weft.optimizer_slot = {parameter = "w", role = "momentum_buffer"}})
// SGD-SAME: -> (tensor<f32> {weft.optimizer_slot = {role = "grad_norm"}}, tensor<4x8xf32> {weft.optimizer_slot = {parameter = "w", role = "param"}}, tensor<4x8xf32> {weft.optimizer_slot = {parameter = "w", role = "momentum_buffer"}})
// SGD-SAME: attributes {weft.optimizer = "sgd"}
// SGD: %[[NORM:.*]] = weft.sqrt
// SGD: %[[MAX:.*]] = weft.constant dense<1.000000e+00> : tensor<f32>
// SGD: %[[EPS:.*]] = weft.constant dense<9.99999997E-7> : tensor<f32>
// SGD: %[[SHIFTED:.*]] = weft.add %[[NORM]], %[[EPS]]
// SGD: %[[COEF:.*]] = weft.div %[[MAX]], %[[SHIFTED]]
// SGD: %[[C:.*]] = weft.minimum %[[COEF]], %[[MAX]]
// SGD: %[[G:.*]] = weft.mul %{{.*}}, %[[C]] : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
// SGD: %[[L2:.*]] = weft.constant dense<1.000000e-01> : tensor<f32>
// SGD: %[[DW:.*]] = weft.mul %[[L2]], %[[W]]
// SGD: %[[D:.*]] = weft.add %[[G]], %[[DW]]
// SGD: %[[MU:.*]] = weft.constant dense<5.000000e-01> : tensor<f32>
// SGD: %[[MB:.*]] = weft.mul %[[MU]], %[[BUF]]
// SGD: %[[NB:.*]] = weft.add %[[MB]], %[[D]]
// SGD: %[[UP:.*]] = weft.mul %[[LR]], %[[NB]]
// SGD: %[[NEW:.*]] = weft.sub %[[W]], %[[UP]]
// SGD: return %[[NORM]], %[[NEW]], %[[NB]]
func.func @step(%gw: tensor<4x8xf32>, %gb: tensor<8xf32>, %loss: tensor<f32>)
    -> (tensor<f32>, tensor<4x8xf32> {weft.gradient_of = "w"}, tensor<8xf32> {weft.gradient_of = "b"}) {
  return %loss, %gw, %gb : tensor<f32>, tensor<4x8xf32>, tensor<8xf32>
}

// -----

// A partitioned step returns each rank's block of a gradient; the optimizer
// takes the whole parameter (its shape from the result's local sharding). A
// parameter returned by two functions (a pipeline stage and its gradient
// reduction) is updated once.
weft.mesh @mesh(dp = 2, tp = 2)
// CHECK-LABEL: func.func @optimizer_step
// CHECK-SAME: tensor<16x8xf32> {weft.optimizer_slot = {parameter = "w", role = "param"}}
// CHECK-SAME: tensor<16x8xf32> {weft.optimizer_slot = {parameter = "w", role = "exp_avg_sq"}}) -> (tensor<f32>
// CHECK-SAME: tensor<16x8xf32> {weft.optimizer_slot = {parameter = "w", role = "exp_avg_sq"}}) attributes {weft.optimizer = "adamw"}
func.func @local(%gw: tensor<8x8xf32>) -> (tensor<8x8xf32> {weft.gradient_of = "w", weft.local_sharding = #weft.sharding<@mesh, [["tp"], []], partial = ["dp"]>}) {
  return %gw : tensor<8x8xf32>
}
func.func @again(%gw: tensor<8x8xf32>) -> (tensor<8x8xf32> {weft.gradient_of = "w", weft.local_sharding = #weft.sharding<@mesh, [["tp"], []]>}) {
  return %gw : tensor<8x8xf32>
}

// -----

// expected-error @+1 {{-weft-build-optimizer: nothing to train: no function returns the gradient (weft.gradient_of) of a parameter that is not frozen (run -weft-differentiate first; check the freeze pattern)}}
module {
  func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}
