// Helpers of the GPU suites that need the CUDA runtime (include only under FLASHGDN_WITH_CUDA).
#pragma once

#include <cuda_runtime.h>

namespace flashgdn::test {

// Captures what `launches` enqueues on `stream` into a CUDA graph, launches the graph once and waits for it.
// Returns the first CUDA error.
template <class F>
cudaError_t run_captured(cudaStream_t stream, F&& launches) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) return e;
  launches();
  e = cudaStreamEndCapture(stream, &graph);
  if (e != cudaSuccess) return e;
  e = cudaGraphInstantiate(&exec, graph, 0);
  if (e == cudaSuccess) {
    e = cudaGraphLaunch(exec, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    cudaGraphExecDestroy(exec);
  }
  cudaGraphDestroy(graph);
  return e;
}

}  // namespace flashgdn::test
