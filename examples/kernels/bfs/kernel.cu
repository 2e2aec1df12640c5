// One level of a breadth-first search over a graph in CSR form, as in Rodinia's bfs: every
// node of the frontier marks its unvisited neighbours with the next level.
extern "C" __global__ void bfs(const int* offsets, const int* edges, int* level, int n, int depth) {
    int v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v < n) {
        if (level[v] == depth) {
            for (int e = offsets[v]; e < offsets[v + 1]; e++) {
                int w = edges[e];
                if (level[w] == -1) {
                    level[w] = depth + 1;
                }
            }
        }
    }
}
