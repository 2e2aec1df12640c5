// Sums of blocks of 256 values: the classic shared-memory tree reduction, a barrier after every
// step, down to the last warp.
extern "C" __global__ void reduction(const float* in, float* sums, int n) {
    __shared__ float s[256];
    int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? in[i] : 0.0f;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (t < stride) {
            s[t] += s[t + stride];
        }
        __syncthreads();
    }
    if (t == 0) {
        sums[blockIdx.x] = s[0];
    }
}
