// Friedman-1: the standard harness (the PTX route can take it). On the compiled routes each kernel
// also takes the free parameters' values as a last argument `const float* p` (added when a unit is
// rendered), so a structure compiles once; elsewhere the values are written in as float literals.
//@kernel
extern "C" __global__ void {{KERNEL}}(const float* __restrict__ in_x1,
                                      const float* __restrict__ in_x2,
                                      const float* __restrict__ in_x3,
                                      const float* __restrict__ in_x4,
                                      const float* __restrict__ in_x5,
                                      float* __restrict__ out_y,
                                      int NCASES)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= NCASES) return;
    const float x1 = in_x1[c];
    const float x2 = in_x2[c];
    const float x3 = in_x3[c];
    const float x4 = in_x4[c];
    const float x5 = in_x5[c];
    out_y[c] = (float)({{PHENOTYPE}});
}
