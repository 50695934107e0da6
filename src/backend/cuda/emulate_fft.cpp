// The backend's c2r kernel `hermitian_planes` runs on the CPU: a host C++ compiler builds the
// FFT kernels' source (fft_kernels.cu, written beside this file by the test that compiles it)
// with the few CUDA names they use stood in for, every thread of every block in turn (the
// kernel shares nothing between threads). Over plans of 1 to 4 axes, odd and even lengths, lines
// longer than a block and batches with gaps between them, every value of the two planes must be
// the mean of itself and its partner's conjugate, computed here from the indices directly, and
// nothing else may change; the launch is the host's (`plane_lines` in fft.rs), and again with
// few blocks, each looping over the lines. Exit status 0 when all do.
#include <complex>
#include <cstdio>
#include <vector>

#define __global__
struct float2 { float x, y; };
struct double2 { double x, y; };
inline float2 make_float2(float a, float b) { return {a, b}; }
inline double2 make_double2(double a, double b) { return {a, b}; }
struct D3 { unsigned int x, y, z; };
D3 threadIdx, blockIdx, blockDim, gridDim;

#include "fft_kernels.cu"

typedef unsigned long long u64;

// One plan's planes, of values of type C (float2 or double2), launched over `most_y` blocks
// along y at most; the number of values wrong.
template <typename C>
static u64 planes(const std::vector<u64>& dims, u64 m, unsigned bins, u64 batch, u64 gap, u64 most_y) {
    u64 plane = 1;
    for (u64 d : dims) plane *= d;
    const u64 per = plane * m + gap, n = batch * per;
    std::vector<C> x(n), before(n);
    for (u64 i = 0; i < n; i++) x[i] = before[i] = C{(decltype(C::x))((double)(i % 977) - 400.5), (decltype(C::x))((double)(i % 613) * 0.25 - 70)};
    std::vector<u64> table(dims);
    table.push_back(1);
    const u64 inner = dims.empty() ? 1 : dims.back(), lines = batch * (plane / inner);
    u64 bx = 1;
    while (bx < inner && bx < 256) bx *= 2;
    const u64 by = 256 / bx, gy = std::min(std::min((lines + by - 1) / by, (u64)65535), most_y);
    blockDim = {(unsigned)bx, (unsigned)by, 1};
    gridDim = {(unsigned)((inner + bx - 1) / bx), (unsigned)gy, 1};
    for (blockIdx.y = 0; blockIdx.y < gridDim.y; blockIdx.y++)
        for (blockIdx.x = 0; blockIdx.x < gridDim.x; blockIdx.x++)
            for (threadIdx.y = 0; threadIdx.y < blockDim.y; threadIdx.y++)
                for (threadIdx.x = 0; threadIdx.x < blockDim.x; threadIdx.x++)
                    hermitian_planes(x.data(), sizeof(C) == 16, table.data(), (unsigned)dims.size(), plane, m, bins, batch, per);
    u64 wrong = 0;
    std::vector<C> want(before);
    for (u64 b = 0; b < batch; b++)
        for (unsigned e = 0; e < bins; e++)
            for (u64 g = 0; g < plane; g++) {
                u64 partner = 0, stride = 1, rest = g;
                for (int a = (int)dims.size() - 1; a >= 0; a--) {
                    const u64 i = rest % dims[a];
                    rest /= dims[a];
                    partner += (dims[a] - i) % dims[a] * stride;
                    stride *= dims[a];
                }
                const u64 bin = e ? m - 1 : 0, at = b * per + g * m + bin, to = b * per + partner * m + bin;
                const C p = before[at], q = before[to];
                want[at] = C{(p.x + q.x) * (decltype(C::x))0.5, (p.y - q.y) * (decltype(C::x))0.5};
            }
    for (u64 i = 0; i < n; i++) wrong += x[i].x != want[i].x || x[i].y != want[i].y;
    return wrong;
}

int main() {
    struct Case { std::vector<u64> dims; u64 m; unsigned bins; u64 batch, gap; };
    const Case cases[] = {
        {{}, 5, 1, 1000, 0},        // 1-D plans: each batch's first bin made real
        {{}, 4, 2, 37, 3},
        {{7}, 4, 2, 3, 5},
        {{8}, 2, 2, 1, 0},          // m 2: both bins, every value
        {{5, 300}, 3, 2, 2, 1},     // lines longer than a block
        {{6, 1}, 9, 1, 4, 0},       // a last axis of 1
        {{1, 6}, 9, 2, 1, 0},
        {{3, 4, 5}, 3, 2, 2, 7},
        {{2, 3, 4, 5}, 2, 2, 3, 0}, // four axes besides the last
        {{61, 33}, 6, 2, 1, 0},
        {{64, 64}, 17, 1, 2, 0},
    };
    u64 wrong = 0, runs = 0;
    for (const Case& c : cases)
        for (u64 most_y : {(u64)65535, (u64)3}) {
            const u64 f = planes<float2>(c.dims, c.m, c.bins, c.batch, c.gap, most_y);
            const u64 d = planes<double2>(c.dims, c.m, c.bins, c.batch, c.gap, most_y);
            if (f || d) std::printf("dims of %zu axes, m %llu, bins %u: %llu wrong\n", c.dims.size(), c.m, c.bins, f + d);
            wrong += f + d;
            runs += 2;
        }
    std::printf("%llu plans, %llu values wrong\n", runs, wrong);
    return wrong != 0;
}
