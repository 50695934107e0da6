#!/usr/bin/env python3
"""The plan's peak memory against what runs hold, over every kind of step.

Runs the release binary on one-step specs (each collective, redistributions, matmul algorithms,
FFT kinds), each without a check, with `check = true`, and with its result written, at 1 and 3
ranks (RANKS=1,3), square tensors of side N (default 1024), and prints per case: the plan's peak
per rank (MiB), the most any rank allocated at once and the growth of its resident set (MiB,
from the manifest's `rank_info[r].memory`), and both as ratios to the plan.

    N=1024 RANKS=1,3 bench/memory_truth.py [NAME_FILTER...]
"""
import json, os, shutil, subprocess, sys

os.makedirs('/tmp/distrun-memory-truth', exist_ok=True)
D = os.environ.get('D', 'target/release/distrun')
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT='1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM='1', OMPI_MCA_rmaps_base_oversubscribe='1')
N = int(os.environ.get('N', '1024'))  # side
def t(name, shape, dist, dtype='f64', layout='C', init='{ uniform = { low = -1.0, high = 1.0 } }'):
    return f'[tensors.{name}]\nshape = {shape}\ndtype = "{dtype}"\nlayout = "{layout}"\ndistribution = {dist}\ninit = {init}\n'
P='"partial"'; R='"replicated"'
def slab(a): return '{ slab = %d }' % a
cases = {
 'all_reduce': (t('x', [N,N], P), 'op = "all_reduce"\ninput = "x"\nout = "y"'),
 'all_reduce_F': (t('x', [N,N], P), 'op = "all_reduce"\ninput = "x"\nout = "y"') ,
 'reduce': (t('x', [N,N], P), 'op = "reduce"\ninput = "x"\nout = "y"\nroot = 0'),
 'broadcast': (t('x', [N,N], '{ root = 0 }'), 'op = "broadcast"\ninput = "x"\nout = "y"'),
 'all_gather': (t('x', [N,N], slab(0)), 'op = "all_gather"\ninput = "x"\nout = "y"'),
 'all_gather1': (t('x', [N,N], slab(1)), 'op = "all_gather"\ninput = "x"\nout = "y"'),
 'reduce_scatter': (t('x', [N,N], P), 'op = "reduce_scatter"\ninput = "x"\nout = "y"'),
 'reduce_scatter1': (t('x', [N,N], P), 'op = "reduce_scatter"\ninput = "x"\nout = "y"\naxis = 1'),
 'gather': (t('x', [N,N], slab(0)), 'op = "gather"\ninput = "x"\nout = "y"'),
 'scatter': (t('x', [N,N], '{ root = 0 }'), 'op = "scatter"\ninput = "x"\nout = "y"'),
 'redist01': (t('x', [N,N], slab(0)), 'op = "redistribute"\ninput = "x"\nout = "y"\ndistribution = { slab = 1 }'),
 'redistCF': (t('x', [N,N], slab(0)), 'op = "redistribute"\ninput = "x"\nout = "y"\ndistribution = { slab = 0 }\nlayout = "F"'),
 'redist_bc': (t('x', [N,N], slab(0)), 'op = "redistribute"\ninput = "x"\nout = "y"\ndistribution = { block_cyclic = { blocks = [64, 64] } }'),
 'matmul_local': (t('a', [N,N], slab(0)) + t('b', [N,N], R), 'op = "matmul"\na = "a"\nb = "b"\nout = "y"'),
 'matmul_ag': (t('a', [N,N], slab(0)) + t('b', [N,N], slab(1)), 'op = "matmul"\na = "a"\nb = "b"\nout = "y"\nalgorithm = "ag_gemm"'),
 'matmul_rs': (t('a', [N,N], slab(1)) + t('b', [N,N], slab(0)), 'op = "matmul"\na = "a"\nb = "b"\nout = "y"\nalgorithm = "gemm_rs"'),
 'matmul_ar': (t('a', [N,N], slab(1)) + t('b', [N,N], slab(0)), 'op = "matmul"\na = "a"\nb = "b"\nout = "y"\nalgorithm = "gemm_ar"'),
 'matmul_epi': (t('a', [N,N], slab(0)) + t('b', [N,N], R) + t('c', [N,N], slab(0)), 'op = "matmul"\na = "a"\nb = "b"\nc = "c"\nbeta = 0.5\nepilog = "gelu"\nout = "y"'),
 'matmul_summa': (t('a', [N,N], '{ block_cyclic = { blocks = [64, 64] } }') + t('b', [N,N], '{ block_cyclic = { blocks = [64, 64] } }'), 'op = "matmul"\na = "a"\nb = "b"\nout = "y"\nalgorithm = "summa"'),
 'fft3': (t('x', [128,128,128], slab(0), dtype='c128'), 'op = "fft"\ninput = "x"\nout = "y"'),
 'fft3_r2c': (t('x', [128,128,128], slab(0)), 'op = "fft"\ninput = "x"\nout = "y"\nkind = "r2c"'),
 'fft2': (t('x', [N,N], slab(0), dtype='c128'), 'op = "fft"\ninput = "x"\nout = "y"'),
}
only = sys.argv[1:] 
rows = []
for name, (tensors, step) in cases.items():
    if only and not any(o in name for o in only): continue
    for ranks in [int(r) for r in os.environ.get('RANKS', '1,3').split(',')]:
        for check, out in [(False, False), (True, False), (False, True)]:
            spec = f'[job]\nname = "m"\n{tensors}[[steps]]\n{step}\ncheck = {str(check).lower()}\n[output]\ntensors = [{chr(34)+"y"+chr(34) if out else ""}]\n'
            if name == 'all_reduce_F': spec = spec.replace('layout = "C"', 'layout = "F"')
            f = f'/tmp/distrun-memory-truth/{name}.toml'; open(f, 'w').write(spec)
            o = f'/tmp/distrun-memory-truth/out'; shutil.rmtree(o, ignore_errors=True)
            cmd = ([D] if ranks == 1 else ['mpiexec', '-n', str(ranks), D]) + ['run', f, '-q', '--out', o]
            r = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if r.returncode != 0:
                rows.append((name, ranks, check, out, 'FAIL', r.stderr[-300:])); print(rows[-1]); continue
            m = json.load(open(o + '/manifest.json'))
            plan = m['planned_peak_bytes_per_rank']
            heap = max(x['memory']['heap_peak_bytes'] for x in m['rank_info'])
            rss = max(x['memory'].get('max_rss_bytes', 0) for x in m['rank_info'])
            row = (name, ranks, 'check' if check else '', 'out' if out else '', plan >> 20, heap >> 20, rss >> 20, round(heap / plan, 2), round(rss / plan, 2))
            print(*row, sep='\t', flush=True)
