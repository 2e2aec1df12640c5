// Keijzer-6: the phenotype is one expression of the real input x, read from the case's
// data (the original implementation used the thread index as x, with integer division).
// Constants like 07.35 are doubles, so parts of an expression may be computed in double
// (C's usual arithmetic conversions); the value is rounded to float once, on store.
//@kernel
extern "C" __global__ void {{KERNEL}}(const float* __restrict__ in_x,
                                      float* __restrict__ out_y,
                                      int NCASES)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= NCASES) return;
    const float x = in_x[c];
    out_y[c] = (float)({{PHENOTYPE}});
}
