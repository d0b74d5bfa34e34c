// course_tensor.cuh: warp-level mma.sync and ldmatrix (filled in by the tensor-core work).
#pragma once
