// One Jacobi step of the 2D heat equation on an n x n grid (a 5-point stencil, as in Rodinia's
// hotspot): the border is copied, the inside averaged with its four neighbours.
extern "C" __global__ void stencil(const float* in, float* out, int n, float alpha) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= n || y >= n) return;
    int i = y * n + x;
    if (x == 0 || y == 0 || x == n - 1 || y == n - 1) {
        out[i] = in[i];
        return;
    }
    float c = in[y * n + x];
    float l = in[y * n + (x - 1)];
    float r = in[y * n + (x + 1)];
    float u = in[(y - 1) * n + x];
    float d = in[(y + 1) * n + x];
    out[y * n + x] = c + alpha * (l + r + u + d - 4.0f * in[y * n + x]);
}
