// The gradient of strided slices (GPT-J's interleaved rotary embedding takes
// x[..., ::2] and x[..., 1::2]), run: d(sum(slice(x * w) * c))/dw is x times c
// at the places the slice took, 0 elsewhere.
// RUN: weft-opt -weft-differentiate %s > %t.mlir
// RUN: rm -rf %t.out && weft run %t.mlir -o %t.out --output-format npy
// RUN: %numpy_python -c "import numpy as np, sys; g = np.load(sys.argv[1] + '/output_1.npy'); want = np.array([[0, 2, 0, 40, 0, 600], [0, 8000, 0, 100000, 0, 1200000]], np.float32); print('dw', 'exact' if np.array_equal(g, want) else g)" %t.out | FileCheck %s
// RUN: %numpy_python -c "import numpy as np, sys; g = np.load(sys.argv[1] + '/output_2.npy'); want = np.zeros((4, 5), np.float32); want[::3, :4:3] = [[1, 2], [3, 4]]; print('dv', 'exact' if np.array_equal(g, want) else g)" %t.out | FileCheck %s --check-prefix=STRIDE3
// CHECK: dw exact
// STRIDE3: dv exact
func.func @strided() -> tensor<f32> {
  %x = weft.constant dense<[[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [7.0, 8.0, 9.0, 10.0, 11.0, 12.0]]> : tensor<2x6xf32>
  %w = weft.parameter "w" : tensor<2x6xf32> = dense<1.0>
  %y = weft.mul %x, %w : tensor<2x6xf32>
  // Columns 1, 3 and 5: the gradient spaced over 6 places is cut to the 5
  // after the start.
  %z = weft.slice %y starts [0, 1] limits [2, 6] strides [1, 2] : tensor<2x6xf32> -> tensor<2x3xf32>
  %c = weft.constant dense<[[1.0, 10.0, 100.0], [1000.0, 10000.0, 100000.0]]> : tensor<2x3xf32>
  %p = weft.mul %z, %c : tensor<2x3xf32>
  %s = weft.reduce_sum %p axes [0, 1] : tensor<2x3xf32> -> tensor<f32>
  // Strided in two dimensions, with a limit short of the end: rows 0 and 3,
  // columns 0 and 3 of a 4x5 parameter.
  %v = weft.parameter "v" : tensor<4x5xf32> = dense<1.0>
  %vz = weft.slice %v starts [0, 0] limits [4, 4] strides [3, 3] : tensor<4x5xf32> -> tensor<2x2xf32>
  %d = weft.constant dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>
  %vp = weft.mul %vz, %d : tensor<2x2xf32>
  %vs = weft.reduce_sum %vp axes [0, 1] : tensor<2x2xf32> -> tensor<f32>
  %loss = weft.add %s, %vs : tensor<f32>
  return %loss : tensor<f32>
}
