//@kernel
extern "C" __global__ void {{KERNEL}}(const float* __restrict__ in_x1,
                                      const float* __restrict__ in_x2,
                                      float* __restrict__ out_y,
                                      int NCASES)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= NCASES) return;
    const float x1 = in_x1[c];
    const float x2 = in_x2[c];
    out_y[c] = (float)({{PHENOTYPE}});
}
