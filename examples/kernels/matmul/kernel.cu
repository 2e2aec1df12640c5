// A naive matrix multiply, C = A * B for n x n matrices, one thread per element of C, in the
// style of the simple benchmarks GEVO started from: every operand is read from global memory.
extern "C" __global__ void matmul(const float* a, const float* b, float* c, int n) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < n && col < n) {
        float sum = 0.0f;
        for (int k = 0; k < n; k++) {
            if (row < n && col < n) {
                sum += a[row * n + k] * b[k * n + col];
            }
        }
        c[row * n + col] = sum;
    }
}
