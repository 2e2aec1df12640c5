// Distances from every record (a latitude, longitude pair) to one target point, as in Rodinia's
// nearest-neighbour kernel; the host then picks the smallest.
struct LatLong {
    float lat;
    float lng;
};

extern "C" __global__ void nn(const LatLong* records, float* distances, int n, float lat, float lng) {
    int gid = blockDim.x * (gridDim.x * blockIdx.y + blockIdx.x) + threadIdx.x;
    if (gid < n) {
        const LatLong* p = &records[gid];
        float dlat = lat - p->lat;
        float dlng = lng - p->lng;
        distances[gid] = (float)sqrt(dlat * dlat + dlng * dlng);
    }
}
