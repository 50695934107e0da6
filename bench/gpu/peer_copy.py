"""How fast can every GPU of the machine send to all the others at once: the ceiling of an
all-to-all transpose (the slab FFT's, the puts of an all_to_all step), by each way of moving.

    python bench/gpu/peer_copy.py [--mib 512] [--iters 10]

One process drives every GPU (peer access on). Each GPU sends `--mib` MiB to each peer, all GPUs
at once; the figure is the bytes leaving one GPU per second (nccl-tests' busbw of all_to_all).
Ways: copy engines, one stream per GPU (peers in ring order, as distrun's puts) or one stream
per peer; the same as 2-D copies shaped like the FFT's way back (256 KiB rows); and an SM kernel
writing into the peers, with a few block counts (it takes SMs from whatever else runs).

With `--pairs` the GPUs instead exchange in pairs (0 <-> 1, 2 <-> 3: pencils to slabs on 4 GPUs),
each sending `--mib` MiB to its partner only: contiguous or as 2-D copies (rows of `--row-kib`
KiB, packed at the source, every other row at the destination), from one stream or split into
row bands over several streams (the copy engines one copy may not fill), one way or both.
"""
import argparse
import time

import cupy as cp

KERNEL = cp.RawKernel(r"""
extern "C" __global__ void copy2d(const int4* src, int4* dst, unsigned long long width,
                                   unsigned long long height, unsigned long long spitch,
                                   unsigned long long dpitch) {
    for (unsigned long long row = blockIdx.y; row < height; row += gridDim.y)
        for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < width;
             i += (unsigned long long)gridDim.x * blockDim.x)
            dst[row * dpitch + i] = src[row * spitch + i];
}
""", "copy2d")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--widths", type=int, nargs="*", default=[],
                    help="also 2-D copies of rows this many KiB wide (packed at the source, "
                         "strided at the destination, as a transposed landing's puts)")
    ap.add_argument("--pairs", action="store_true",
                    help="exchange in pairs only (see above) instead of all to all")
    ap.add_argument("--row-kib", type=int, default=2048, help="--pairs: the 2-D copies' rows")
    args = ap.parse_args()
    n = cp.cuda.runtime.getDeviceCount()
    if args.pairs:
        return pairs(n, args)
    part = args.mib << 20
    rt = cp.cuda.runtime
    src, dst, streams = [], [], []
    for i in range(n):
        with cp.cuda.Device(i):
            for j in range(n):
                if j != i:
                    try:
                        rt.deviceEnablePeerAccess(j)
                    except rt.CUDARuntimeError:
                        pass
            src.append(cp.ones(n * part, dtype=cp.uint8))
            dst.append(cp.zeros(n * part, dtype=cp.uint8))
            streams.append([cp.cuda.Stream(non_blocking=True) for _ in range(n)])

    def sync():
        for i in range(n):
            with cp.cuda.Device(i):
                cp.cuda.Device(i).synchronize()

    def measure(issue):
        for _ in range(2):
            issue()
        sync()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            issue()
        sync()
        t = (time.perf_counter() - t0) / args.iters
        return (n - 1) * part / t / 1e9

    def peers(i):
        return [(i + k) % n for k in range(1, n)]

    def ce(per_peer):
        def issue():
            for i in range(n):
                with cp.cuda.Device(i):
                    for k, q in enumerate(peers(i)):
                        s = streams[i][k if per_peer else 0]
                        rt.memcpyPeerAsync(dst[q].data.ptr + i * part, q, src[i].data.ptr + q * part, i,
                                           part, s.ptr)
        return issue

    # The FFT way back on 4 GPUs: rows of 256 KiB, source pitch 4x wider, destination 4x too.
    width = 256 << 10
    height = part // width

    def ce2d(per_peer):
        def issue():
            for i in range(n):
                with cp.cuda.Device(i):
                    for k, q in enumerate(peers(i)):
                        s = streams[i][k if per_peer else 0]
                        rt.memcpy2DAsync(dst[q].data.ptr + i * width, n * width,
                                         src[i].data.ptr + q * width, n * width, width, height,
                                         rt.memcpyDefault, s.ptr)
        return issue

    def narrow(kib):
        # Rows of `kib` KiB, packed at the source, n times wider apart at the destination.
        w = kib << 10
        rows = part // w

        def issue():
            for i in range(n):
                with cp.cuda.Device(i):
                    for q in peers(i):
                        rt.memcpy2DAsync(dst[q].data.ptr + i * w, n * w, src[i].data.ptr + q * part, w,
                                         w, rows, rt.memcpyDefault, streams[i][0].ptr)
        return issue

    def sm(blocks, per_peer):
        def issue():
            for i in range(n):
                with cp.cuda.Device(i):
                    for k, q in enumerate(peers(i)):
                        s = streams[i][k if per_peer else 0]
                        with s:
                            KERNEL((blocks, 8), (512,),
                                   (src[i].data.ptr + q * width, dst[q].data.ptr + i * width,
                                    cp.uint64(width // 16), cp.uint64(height), cp.uint64(n * width // 16),
                                    cp.uint64(n * width // 16)))
        return issue

    def mixed(sm_share, blocks):
        # The first rows of each peer's part by an SM kernel, the rest by the copy engines, at once.
        sm_rows = int(height * sm_share)

        def issue():
            for i in range(n):
                with cp.cuda.Device(i):
                    for k, q in enumerate(peers(i)):
                        s = streams[i][k]
                        rt.memcpy2DAsync(dst[q].data.ptr + i * width + sm_rows * n * width, n * width,
                                         src[i].data.ptr + q * width + sm_rows * n * width, n * width,
                                         width, height - sm_rows, rt.memcpyDefault, s.ptr)
                    for k, q in enumerate(peers(i)):
                        with streams[i][n - 1]:
                            KERNEL((blocks, 8), (512,),
                                   (src[i].data.ptr + q * width, dst[q].data.ptr + i * width,
                                    cp.uint64(width // 16), cp.uint64(sm_rows), cp.uint64(n * width // 16),
                                    cp.uint64(n * width // 16)))
        return issue

    print(f"{n} GPUs, {args.mib} MiB to each peer; GB/s leaving each GPU (all at once)")
    print("| way | GB/s |")
    print("| --- | --- |")
    for name, issue in [
        ("copy engines, one stream, contiguous", ce(False)),
        ("copy engines, stream per peer, contiguous", ce(True)),
        ("copy engines, one stream, 2-D 256 KiB rows", ce2d(False)),
        ("copy engines, stream per peer, 2-D 256 KiB rows", ce2d(True)),
        *[(f"copy engines, one stream, 2-D {k} KiB rows packed at the source", narrow(k)) for k in args.widths],
        *[(f"SM kernel {b}x8 blocks per peer, stream per peer, 2-D", sm(b, True)) for b in (2, 4, 8, 16)],
        ("SM kernel 8x8 blocks, one stream, 2-D", sm(8, False)),
        *[(f"copy engines and SM kernel ({int(f * 100)}% of rows, {b}x8 blocks) at once", mixed(f, b))
          for f, b in ((0.1, 4), (0.2, 8), (0.3, 16))],
    ]:
        print(f"| {name} | {measure(issue):.1f} |", flush=True)


def pairs(n, args):
    """GPU i and i ^ 1 send each other `--mib` MiB: GB/s leaving each sending GPU."""
    rt = cp.cuda.runtime
    n -= n % 2
    part, width = args.mib << 20, args.row_kib << 10
    rows = part // width
    src, dst, streams = [], [], []
    for i in range(n):
        with cp.cuda.Device(i):
            try:
                rt.deviceEnablePeerAccess(i ^ 1)
            except rt.CUDARuntimeError:
                pass
            src.append(cp.ones(part, dtype=cp.uint8))
            dst.append(cp.zeros(2 * part, dtype=cp.uint8))
            streams.append([cp.cuda.Stream(non_blocking=True) for _ in range(8)])

    def measure(senders, issue):
        def once():
            for i in senders:
                with cp.cuda.Device(i):
                    issue(i)
        for _ in range(2):
            once()
        for i in range(n):
            cp.cuda.Device(i).synchronize()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            once()
        for i in range(n):
            cp.cuda.Device(i).synchronize()
        return part / ((time.perf_counter() - t0) / args.iters) / 1e9

    def flat(k):
        def issue(i):
            step = part // k
            for j in range(k):
                rt.memcpyAsync(dst[i ^ 1].data.ptr + j * step, src[i].data.ptr + j * step, step,
                               rt.memcpyDefault, streams[i][j].ptr)
        return issue

    def rows2d(k):
        def issue(i):
            band = -(-rows // k)
            for j in range(k):
                h = min(band, rows - j * band)
                rt.memcpy2DAsync(dst[i ^ 1].data.ptr + j * band * 2 * width, 2 * width,
                                 src[i].data.ptr + j * band * width, width, width, h,
                                 rt.memcpyDefault, streams[i][j].ptr)
        return issue

    both, one = list(range(n)), list(range(0, n, 2))
    print(f"{n} GPUs in pairs, {args.mib} MiB to the partner; GB/s leaving each sending GPU")
    print("| way | both ways | one way |")
    print("| --- | --- | --- |")
    for name, issue in [
        *[(f"contiguous, {k} stream(s)", flat(k)) for k in (1, 2, 4, 8)],
        *[(f"2-D {args.row_kib} KiB rows, {k} stream(s)", rows2d(k)) for k in (1, 2, 4, 8)],
    ]:
        print(f"| {name} | {measure(both, issue):.1f} | {measure(one, issue):.1f} |", flush=True)


if __name__ == "__main__":
    main()
