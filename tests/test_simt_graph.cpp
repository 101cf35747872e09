// tests/test_simt_graph.cpp: the emulator's stream capture and CUDA graphs (kernels/simt/
// simt_graphs.cpp; the rules: kernels/simt/README.md, "Graphs"). A captured sequence of copies,
// memsets, kernels and cuBLAS / cuDNN calls runs nothing until its graph is launched, then gives
// what the same sequence run eagerly gives, each time it is launched, with the arguments captured;
// each call CUDA refuses during capture answers CUDA's error and spoils the capture.
#include <doctest/doctest.h>

#include <string>
#include <thread>
#include <vector>

#include "kernels/simt/cublas.h"
#include "kernels/simt/cudnn.h"
#include "kernels/simt/simt.h"

namespace {

#define CUDA_REQUIRE(expr) REQUIRE((expr) == cudaSuccess)

std::string name(cudaError_t e) { return cudaGetErrorName(e); }

// y[i] = a * y[i] + x[i], one thread an element. (n)
__global__ void scale_add(int n, float a, const float* x, float* y) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = a * y[i] + x[i];
}
cudaError_t scale_add_on(cudaStream_t s, int n, float a, const float* x, float* y) {
  return simt::launch(scale_add, dim3((n + 63) / 64), dim3(64), 0, s, n, a, x, y);
}

// n floats of pinned host memory (cudaMallocHost) and of device memory, allocated before a capture.
struct Buffers {
  int n;
  float *host_in = nullptr, *host_out = nullptr, *x = nullptr, *y = nullptr;
  explicit Buffers(int count) : n(count) {
    const size_t bytes = sizeof(float) * static_cast<size_t>(n);
    CUDA_REQUIRE(cudaMallocHost(&host_in, bytes));
    CUDA_REQUIRE(cudaMallocHost(&host_out, bytes));
    CUDA_REQUIRE(cudaMalloc(&x, bytes));
    CUDA_REQUIRE(cudaMalloc(&y, bytes));
  }
  ~Buffers() {
    cudaFreeHost(host_in);
    cudaFreeHost(host_out);
    cudaFree(x);
    cudaFree(y);
  }
  size_t bytes() const { return sizeof(float) * static_cast<size_t>(n); }
};

// The step under test: upload x, y = 0, y = 2y + x twice, then y = 0.5 y + x, download y.
// Eagerly on the legacy stream, or enqueued on `s` (captured when s captures).
void step(cudaStream_t s, const Buffers& b) {
  CUDA_REQUIRE(cudaMemcpyAsync(b.x, b.host_in, b.bytes(), cudaMemcpyHostToDevice, s));
  CUDA_REQUIRE(cudaMemsetAsync(b.y, 0, b.bytes(), s));
  CUDA_REQUIRE(scale_add_on(s, b.n, 2.0f, b.x, b.y));
  CUDA_REQUIRE(scale_add_on(s, b.n, 2.0f, b.x, b.y));
  CUDA_REQUIRE(scale_add_on(s, b.n, 0.5f, b.x, b.y));
  CUDA_REQUIRE(cudaMemcpyAsync(b.host_out, b.y, b.bytes(), cudaMemcpyDeviceToHost, s));
}

std::vector<cudaGraphNodeType> node_types(cudaGraph_t g) {
  size_t count = 0;
  REQUIRE(cudaGraphGetNodes(g, nullptr, &count) == cudaSuccess);
  std::vector<cudaGraphNode_t> nodes(count);
  REQUIRE(cudaGraphGetNodes(g, nodes.data(), &count) == cudaSuccess);
  std::vector<cudaGraphNodeType> types;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType t{};
    REQUIRE(cudaGraphNodeGetType(node, &t) == cudaSuccess);
    types.push_back(t);
  }
  return types;
}

// A created stream capturing in `mode`, ended (and its graph destroyed) at the end of the scope.
struct Capturing {
  cudaStream_t s = nullptr;
  explicit Capturing(cudaStreamCaptureMode mode, unsigned flags = cudaStreamDefault) {
    CUDA_REQUIRE(cudaStreamCreateWithFlags(&s, flags));
    CUDA_REQUIRE(cudaStreamBeginCapture(s, mode));
  }
  cudaStreamCaptureStatus status() const {
    cudaStreamCaptureStatus st{};
    REQUIRE(cudaStreamIsCapturing(s, &st) == cudaSuccess);
    return st;
  }
  // EndCapture's answer (the graph, if any, is destroyed).
  cudaError_t end() {
    cudaGraph_t g = nullptr;
    const cudaError_t e = cudaStreamEndCapture(s, &g);
    if (g) cudaGraphDestroy(g);
    if (e != cudaSuccess) CHECK(g == nullptr);
    return e;
  }
  ~Capturing() {
    cudaStreamCaptureStatus st{};
    if (cudaStreamIsCapturing(s, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone) end();
    cudaStreamDestroy(s);
    cudaGetLastError();
  }
};

// After a refused call: the capture is invalidated, later work on it is refused, and EndCapture
// says so and gives no graph.
void expect_invalidated(Capturing& c, const Buffers& b) {
  CHECK(c.status() == cudaStreamCaptureStatusInvalidated);
  CHECK(name(scale_add_on(c.s, b.n, 1.0f, b.x, b.y)) == "cudaErrorStreamCaptureInvalidated");
  CHECK(name(c.end()) == "cudaErrorStreamCaptureInvalidated");
  CHECK(c.status() == cudaStreamCaptureStatusNone);
}

}  // namespace

TEST_CASE("graph: capture runs nothing; replay equals eager, every launch, with new input") {
  const int n = 200;
  Buffers eager(n), captured(n);
  for (int i = 0; i < n; ++i) eager.host_in[i] = captured.host_in[i] = 0.25f * static_cast<float>(i) - 7.0f;
  for (int i = 0; i < n; ++i) captured.host_out[i] = -1.0f;
  step(nullptr, eager);

  cudaStream_t s = nullptr;
  CUDA_REQUIRE(cudaStreamCreate(&s));
  CUDA_REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureStatus st{};
  CUDA_REQUIRE(cudaStreamIsCapturing(s, &st));
  CHECK(st == cudaStreamCaptureStatusActive);
  step(s, captured);
  cudaGraph_t graph = nullptr;
  CUDA_REQUIRE(cudaStreamEndCapture(s, &graph));
  CUDA_REQUIRE(cudaStreamIsCapturing(s, &st));
  CHECK(st == cudaStreamCaptureStatusNone);
  CHECK(captured.host_out[0] == -1.0f);  // nothing ran
  CHECK(node_types(graph) == std::vector<cudaGraphNodeType>{cudaGraphNodeTypeMemcpy, cudaGraphNodeTypeMemset,
                                                            cudaGraphNodeTypeKernel, cudaGraphNodeTypeKernel,
                                                            cudaGraphNodeTypeKernel, cudaGraphNodeTypeMemcpy});

  cudaGraphExec_t exec = nullptr;
  CUDA_REQUIRE(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_REQUIRE(cudaGraphDestroy(graph));  // the exec keeps what it runs
  CUDA_REQUIRE(cudaGraphLaunch(exec, s));
  CHECK(captured.host_out[0] == -1.0f);  // queued on s, not run yet
  CUDA_REQUIRE(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) REQUIRE(captured.host_out[i] == eager.host_out[i]);

  // Launched again with new input in the same (captured) pinned buffer: the new result, each time.
  for (int rep = 1; rep <= 3; ++rep) {
    for (int i = 0; i < n; ++i) eager.host_in[i] = captured.host_in[i] = static_cast<float>(rep * i % 17);
    step(nullptr, eager);
    CUDA_REQUIRE(cudaGraphLaunch(exec, rep == 2 ? nullptr : s));  // the legacy stream runs it now
    CUDA_REQUIRE(cudaStreamSynchronize(s));
    for (int i = 0; i < n; ++i) REQUIRE(captured.host_out[i] == eager.host_out[i]);
  }
  CUDA_REQUIRE(cudaGraphExecDestroy(exec));
  CUDA_REQUIRE(cudaStreamDestroy(s));
}

TEST_CASE("graph: N launches run the nodes N times; events of the capture make no nodes") {
  const int n = 64;
  Buffers b(n);
  for (int i = 0; i < n; ++i) b.host_in[i] = static_cast<float>(i);
  CUDA_REQUIRE(cudaMemcpy(b.x, b.host_in, b.bytes(), cudaMemcpyHostToDevice));
  CUDA_REQUIRE(cudaMemset(b.y, 0, b.bytes()));
  cudaStream_t s = nullptr;
  cudaEvent_t e = nullptr;
  CUDA_REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_REQUIRE(cudaEventCreate(&e));
  CUDA_REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  CUDA_REQUIRE(scale_add_on(s, n, 1.0f, b.x, b.y));  // y += x
  CUDA_REQUIRE(cudaEventRecord(e, s));
  CUDA_REQUIRE(cudaStreamWaitEvent(s, e, 0));  // same capture: orders nothing more
  cudaGraph_t graph = nullptr;
  CUDA_REQUIRE(cudaStreamEndCapture(s, &graph));
  size_t count = 0;
  CUDA_REQUIRE(cudaGraphGetNodes(graph, nullptr, &count));
  CHECK(count == 1);
  cudaGraphExec_t exec = nullptr;
  CUDA_REQUIRE(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 5; ++rep) CUDA_REQUIRE(cudaGraphLaunch(exec, s));
  CUDA_REQUIRE(cudaEventSynchronize(e));  // the capture ended: an ordinary (done) event again
  CUDA_REQUIRE(cudaStreamSynchronize(s));
  CUDA_REQUIRE(cudaMemcpy(b.host_out, b.y, b.bytes(), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) REQUIRE(b.host_out[i] == 5.0f * static_cast<float>(i));
  CUDA_REQUIRE(cudaGraphExecDestroy(exec));
  CUDA_REQUIRE(cudaGraphDestroy(graph));
  CUDA_REQUIRE(cudaEventDestroy(e));
  CUDA_REQUIRE(cudaStreamDestroy(s));
}

TEST_CASE("graph: cuBLAS and cuDNN calls on a capturing stream are nodes with their scalars and descriptors") {
  // C (2x2) = alpha * A (2x3) B (3x2), column-major; then C += bias (cudnnAddTensor, 1 x 2 x 1 x 2).
  float *a = nullptr, *b = nullptr, *c = nullptr, *bias = nullptr;
  CUDA_REQUIRE(cudaMalloc(&a, 6 * sizeof(float)));
  CUDA_REQUIRE(cudaMalloc(&b, 6 * sizeof(float)));
  CUDA_REQUIRE(cudaMalloc(&c, 4 * sizeof(float)));
  CUDA_REQUIRE(cudaMalloc(&bias, 4 * sizeof(float)));
  const std::vector<float> ha{1, 2, 3, 4, 5, 6}, hb{1, 0, 1, 0, 1, 1}, hbias{10, 20, 30, 40};
  CUDA_REQUIRE(cudaMemcpy(a, ha.data(), sizeof(float) * 6, cudaMemcpyHostToDevice));
  CUDA_REQUIRE(cudaMemcpy(b, hb.data(), sizeof(float) * 6, cudaMemcpyHostToDevice));
  CUDA_REQUIRE(cudaMemcpy(bias, hbias.data(), sizeof(float) * 4, cudaMemcpyHostToDevice));
  cudaStream_t s = nullptr;
  CUDA_REQUIRE(cudaStreamCreate(&s));
  cublasHandle_t blas = nullptr;
  cudnnHandle_t dnn = nullptr;
  REQUIRE(cublasCreate(&blas) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cudnnCreate(&dnn) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cublasSetStream(blas, s) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cudnnSetStream(dnn, s) == CUDNN_STATUS_SUCCESS);
  CUDA_REQUIRE(cudaMemset(c, 0, 4 * sizeof(float)));
  CUDA_REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  {
    const float alpha = 2, beta = 0, one = 1;  // gone before the replay: their values were captured
    REQUIRE(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &alpha, a, 2, b, 3, &beta, c, 2) ==
            CUBLAS_STATUS_SUCCESS);
    cudnnTensorDescriptor_t d = nullptr;
    REQUIRE(cudnnCreateTensorDescriptor(&d) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 2, 1, 2) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnAddTensor(dnn, &one, d, bias, &one, d, c) == CUDNN_STATUS_SUCCESS);
    REQUIRE(cudnnDestroyTensorDescriptor(d) == CUDNN_STATUS_SUCCESS);
  }
  cudaGraph_t graph = nullptr;
  CUDA_REQUIRE(cudaStreamEndCapture(s, &graph));
  CHECK(node_types(graph) == std::vector<cudaGraphNodeType>{cudaGraphNodeTypeKernel, cudaGraphNodeTypeKernel});
  std::vector<float> hc(4, -1);
  CUDA_REQUIRE(cudaMemcpy(hc.data(), c, sizeof(float) * 4, cudaMemcpyDeviceToHost));
  CHECK(hc == std::vector<float>{0, 0, 0, 0});  // captured, not run
  cudaGraphExec_t exec = nullptr;
  CUDA_REQUIRE(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_REQUIRE(cudaGraphLaunch(exec, s));
  CUDA_REQUIRE(cudaStreamSynchronize(s));
  CUDA_REQUIRE(cudaMemcpy(hc.data(), c, sizeof(float) * 4, cudaMemcpyDeviceToHost));
  // A B = [[1+5, 3+5], [2+6, 4+6]] column-major: (6, 8, 8, 10); times 2, plus the bias.
  CHECK(hc == std::vector<float>{22, 36, 46, 60});
  CUDA_REQUIRE(cudaGraphExecDestroy(exec));
  CUDA_REQUIRE(cudaGraphDestroy(graph));
  cublasDestroy(blas);
  cudnnDestroy(dnn);
  CUDA_REQUIRE(cudaStreamDestroy(s));
  for (float* p : {a, b, c, bias}) CUDA_REQUIRE(cudaFree(p));
}

TEST_CASE("graph: under DryRun the nodes are captured and compute nothing") {
  Buffers b(32);
  for (int i = 0; i < b.n; ++i) b.host_out[i] = 3.0f;
  cudaStream_t s = nullptr;
  CUDA_REQUIRE(cudaStreamCreate(&s));
  cudaGraph_t graph = nullptr;
  {
    simt::DryRun dry;
    CUDA_REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    step(s, b);
    CUDA_REQUIRE(cudaStreamEndCapture(s, &graph));
  }
  size_t count = 0;
  CUDA_REQUIRE(cudaGraphGetNodes(graph, nullptr, &count));
  CHECK(count == 6);
  cudaGraphExec_t exec = nullptr;
  CUDA_REQUIRE(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_REQUIRE(cudaGraphLaunch(exec, s));
  CUDA_REQUIRE(cudaStreamSynchronize(s));
  CHECK(b.host_out[0] == 3.0f);
  CUDA_REQUIRE(cudaGraphExecDestroy(exec));
  CUDA_REQUIRE(cudaGraphDestroy(graph));
  CUDA_REQUIRE(cudaStreamDestroy(s));
}

TEST_CASE("graph: what capture refuses, with CUDA's error names, and the capture invalidated") {
  Buffers b(16);
  std::vector<float> pageable(16, 1.0f);

  SUBCASE("capture of the legacy stream") {
    CHECK(name(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal)) == "cudaErrorStreamCaptureUnsupported");
    CHECK(name(cudaStreamBeginCapture(cudaStreamLegacy, cudaStreamCaptureModeRelaxed)) ==
          "cudaErrorStreamCaptureUnsupported");
  }
  SUBCASE("begin twice, end without a capture") {
    Capturing c(cudaStreamCaptureModeGlobal);
    CHECK(name(cudaStreamBeginCapture(c.s, cudaStreamCaptureModeGlobal)) == "cudaErrorIllegalState");
    CHECK(c.end() == cudaSuccess);
    CHECK(name(c.end()) == "cudaErrorIllegalState");
  }
  SUBCASE("cudaMalloc in Global mode") {
    Capturing c(cudaStreamCaptureModeGlobal);
    void* p = nullptr;
    CHECK(name(cudaMalloc(&p, 64)) == "cudaErrorStreamCaptureUnsupported");
    CHECK(p == nullptr);
    expect_invalidated(c, b);
  }
  SUBCASE("cudaMallocHost in ThreadLocal mode") {
    Capturing c(cudaStreamCaptureModeThreadLocal);
    void* p = nullptr;
    CHECK(name(cudaMallocHost(&p, 64)) == "cudaErrorStreamCaptureUnsupported");
    expect_invalidated(c, b);
  }
  SUBCASE("cudaFree in Global mode") {
    void* p = nullptr;
    CUDA_REQUIRE(cudaMalloc(&p, 64));
    {
      Capturing c(cudaStreamCaptureModeGlobal);
      CHECK(name(cudaFree(p)) == "cudaErrorStreamCaptureUnsupported");
      expect_invalidated(c, b);
    }
    CUDA_REQUIRE(cudaFree(p));  // it was not freed
  }
  SUBCASE("a synchronous cudaMemcpy in Global mode") {
    Capturing c(cudaStreamCaptureModeGlobal, cudaStreamNonBlocking);
    CHECK(name(cudaMemcpy(b.x, pageable.data(), b.bytes(), cudaMemcpyHostToDevice)) ==
          "cudaErrorStreamCaptureUnsupported");
    expect_invalidated(c, b);
  }
  SUBCASE("Relaxed mode allows cudaMalloc; ThreadLocal allows it on another thread") {
    for (cudaStreamCaptureMode mode : {cudaStreamCaptureModeRelaxed, cudaStreamCaptureModeThreadLocal}) {
      Capturing c(mode, cudaStreamNonBlocking);
      void* p = nullptr;
      cudaError_t e = cudaErrorUnknown;
      if (mode == cudaStreamCaptureModeRelaxed)
        e = cudaMalloc(&p, 64);
      else
        std::thread([&] { e = cudaMalloc(&p, 64); }).join();
      CHECK(e == cudaSuccess);
      CHECK(c.status() == cudaStreamCaptureStatusActive);
      CUDA_REQUIRE(scale_add_on(c.s, b.n, 1.0f, b.x, b.y));
      CHECK(c.end() == cudaSuccess);
      CUDA_REQUIRE(cudaFree(p));
    }
  }
  SUBCASE("Global mode refuses cudaMalloc from another thread too") {
    Capturing c(cudaStreamCaptureModeGlobal);
    void* p = nullptr;
    cudaError_t e = cudaSuccess;
    std::thread([&] { e = cudaMalloc(&p, 64); }).join();
    CHECK(name(e) == "cudaErrorStreamCaptureUnsupported");
    expect_invalidated(c, b);
  }
  SUBCASE("legacy-stream work while a blocking stream captures (any mode)") {
    Capturing c(cudaStreamCaptureModeRelaxed);
    CHECK(name(scale_add_on(nullptr, b.n, 1.0f, b.x, b.y)) == "cudaErrorStreamCaptureImplicit");
    expect_invalidated(c, b);
  }
  SUBCASE("a synchronous copy while a blocking stream captures in Relaxed mode") {
    Capturing c(cudaStreamCaptureModeRelaxed);
    CHECK(name(cudaMemcpy(b.x, pageable.data(), b.bytes(), cudaMemcpyHostToDevice)) ==
          "cudaErrorStreamCaptureImplicit");
    cudaStreamCaptureStatus st{};
    CHECK(name(cudaStreamIsCapturing(nullptr, &st)) == "cudaErrorStreamCaptureImplicit");
    expect_invalidated(c, b);
  }
  SUBCASE("legacy-stream work beside a non-blocking capture is allowed") {
    Capturing c(cudaStreamCaptureModeRelaxed, cudaStreamNonBlocking);
    CUDA_REQUIRE(scale_add_on(nullptr, b.n, 1.0f, b.x, b.y));
    CHECK(c.status() == cudaStreamCaptureStatusActive);
    CHECK(c.end() == cudaSuccess);
  }
  SUBCASE("cudaDeviceSynchronize") {
    Capturing c(cudaStreamCaptureModeRelaxed, cudaStreamNonBlocking);
    CHECK(name(cudaDeviceSynchronize()) == "cudaErrorStreamCaptureUnsupported");
    expect_invalidated(c, b);
  }
  SUBCASE("cudaStreamSynchronize and cudaStreamQuery of the capturing stream") {
    for (int query = 0; query < 2; ++query) {
      Capturing c(cudaStreamCaptureModeRelaxed);
      CHECK(name(query ? cudaStreamQuery(c.s) : cudaStreamSynchronize(c.s)) == "cudaErrorStreamCaptureUnsupported");
      expect_invalidated(c, b);
    }
  }
  SUBCASE("cudaEventSynchronize and cudaEventQuery of an event recorded in the capture") {
    for (int query = 0; query < 2; ++query) {
      cudaEvent_t e = nullptr;
      CUDA_REQUIRE(cudaEventCreate(&e));
      {
        Capturing c(cudaStreamCaptureModeRelaxed);
        CUDA_REQUIRE(cudaEventRecord(e, c.s));
        CHECK(name(query ? cudaEventQuery(e) : cudaEventSynchronize(e)) == "cudaErrorCapturedEvent");
        expect_invalidated(c, b);
      }
      CUDA_REQUIRE(cudaEventDestroy(e));
    }
  }
  SUBCASE("a wait on an event recorded outside the capture") {
    cudaEvent_t e = nullptr;
    CUDA_REQUIRE(cudaEventCreate(&e));
    CUDA_REQUIRE(cudaEventRecord(e, nullptr));
    {
      Capturing c(cudaStreamCaptureModeGlobal);
      CHECK(name(cudaStreamWaitEvent(c.s, e, 0)) == "cudaErrorStreamCaptureIsolation");
      expect_invalidated(c, b);
    }
    CUDA_REQUIRE(cudaEventDestroy(e));
  }
  SUBCASE("an asynchronous copy from pageable memory") {
    Capturing c(cudaStreamCaptureModeRelaxed);
    CHECK(name(cudaMemcpyAsync(b.x, pageable.data(), b.bytes(), cudaMemcpyHostToDevice, c.s)) ==
          "cudaErrorStreamCaptureUnsupported");
    expect_invalidated(c, b);
  }
  SUBCASE("a cuBLAS call on the legacy stream while a blocking stream captures") {
    cublasHandle_t blas = nullptr;
    REQUIRE(cublasCreate(&blas) == CUBLAS_STATUS_SUCCESS);
    {
      Capturing c(cudaStreamCaptureModeRelaxed);
      const float one = 1, zero = 0;
      CHECK(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, b.x, 2, b.x, 2, &zero, b.y, 2) ==
            CUBLAS_STATUS_EXECUTION_FAILED);
      CHECK(name(cudaGetLastError()) == "cudaErrorStreamCaptureImplicit");
      expect_invalidated(c, b);
    }
    cublasDestroy(blas);
  }
  SUBCASE("EndCapture of a Global capture from another thread") {
    Capturing c(cudaStreamCaptureModeGlobal);
    cudaError_t e = cudaSuccess;
    cudaGraph_t g = nullptr;
    std::thread([&] { e = cudaStreamEndCapture(c.s, &g); }).join();
    CHECK(name(e) == "cudaErrorStreamCaptureWrongThread");
    CHECK(c.status() == cudaStreamCaptureStatusActive);
    CHECK(c.end() == cudaSuccess);
  }
  cudaGetLastError();
}

TEST_CASE("graph: cudaGetErrorName and cudaGetErrorString know the capture errors") {
  for (cudaError_t e : {cudaErrorStreamCaptureUnsupported, cudaErrorStreamCaptureInvalidated,
                        cudaErrorStreamCaptureUnmatched, cudaErrorStreamCaptureIsolation,
                        cudaErrorStreamCaptureImplicit, cudaErrorCapturedEvent, cudaErrorStreamCaptureWrongThread,
                        cudaErrorIllegalState}) {
    CHECK(name(e).rfind("cudaError", 0) == 0);
    CHECK(std::string(cudaGetErrorString(e)) != "unrecognized error code");
  }
  CHECK(static_cast<int>(cudaErrorStreamCaptureUnsupported) == 900);
  CHECK(static_cast<int>(cudaErrorCapturedEvent) == 907);
}
