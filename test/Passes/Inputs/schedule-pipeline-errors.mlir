// Run by weft-schedule-pipeline.mlir with schedule=interleaved micro-batches=3.

// expected-error@+1 {{-weft-schedule-pipeline: the module is not cut into pipeline stages; run -weft-split-stages first}}
module {
}

// -----

// expected-error@+1 {{-weft-schedule-pipeline: the interleaved schedule with chunks runs micro-batches in groups of the 2 stages: micro-batches=3 is not a multiple of 2}}
module attributes {weft.pipeline = {stages = 2 : i64, chunks = 2 : i64}} {
}
