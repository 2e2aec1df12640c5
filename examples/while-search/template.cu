// Search (Listing 2 of the paper, corrected): each case's list, length and searched
// value arrive as kernel parameters indexed by the global thread id; the locals start
// at zero; reading INPUT can never leave the list.

// INPUT[k] reads element k wrapped into [0, len): C's % truncates toward zero, so
// `INPUT[e % LENINPUT]` would otherwise read before the list when e is negative. The CPU
// evaluator applies the same rule.
struct gp_wrapped_ints {
    const int* data;
    int len;
    __device__ int operator[](int k) const {
        if (len <= 0) return 0;
        int m = k % len;
        if (m < 0) m += len;
        return data[m];
    }
};
//@kernel
extern "C" __global__ void {{KERNEL}}(const int* __restrict__ in_INPUT,
                                      const int* __restrict__ in_LENINPUT,
                                      const int* __restrict__ in_SEARCH,
                                      int* __restrict__ out_OUTPUT,
                                      int NCASES)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= NCASES) return;
    const int LENINPUT = in_LENINPUT[c];
    const gp_wrapped_ints INPUT = { in_INPUT + c * 20, LENINPUT };
    const int SEARCH = in_SEARCH[c];
    int i = 0;
    int tmp = 0;
    int OUTPUT = 0;
    {{PHENOTYPE}}
    out_OUTPUT[c] = OUTPUT;
}
