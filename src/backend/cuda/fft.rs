//! Local FFT phases on the GPU through cuFFT. A phase's transforms become as few cuFFT plans as
//! its axes allow: transforms over a run of trailing axes are one batched multi-dimensional plan
//! (an r2c or c2r among them included), a transform over an inner axis is one strided plan
//! (launched once per block of the axes before it); an axis of a Bluestein length is planned
//! apart where cuFFT's joint plan ran slower (`Seen::apart`). Plans are made on first use and
//! kept.

use super::{Cuda, DevBuf, launch_config};
use crate::backend::work::{AxisOp, LONG_COLUMNS, Phase, RunGrid, bluestein};
use crate::spec::tensor::DType;
use anyhow::{Result, anyhow};
use cudarc::cufft::{CudaFft, result as cufft, sys};
use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg};
use std::ffi::c_int;
use std::sync::Arc;

/// The scaling kernel (normalisation): `x *= s` on n reals; the one-point real transforms
/// (cuFFT squeezes a length-1 axis out of a plan, which would make another axis the real one):
/// r2c `y = (x, 0)`, c2r `y = re(x)`, on n values; a c2r's input made Hermitian on its first
/// and last bins' planes.
pub const KERNELS: &str = r#"
extern "C" __global__ void real_to_complex(const void* x, void* y, int f64, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        if (f64) { ((double*)y)[2 * i] = ((const double*)x)[i]; ((double*)y)[2 * i + 1] = 0.0; }
        else { ((float*)y)[2 * i] = ((const float*)x)[i]; ((float*)y)[2 * i + 1] = 0.0f; }
    }
}
extern "C" __global__ void complex_to_real(const void* x, void* y, int f64, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        if (f64) ((double*)y)[i] = ((const double*)x)[2 * i];
        else ((float*)y)[i] = ((const float*)x)[2 * i];
    }
}
// A c2r's input made Hermitian on the planes of its first and (`bins` 2) last bin
// along the last axis (m complex values), over the plan's other axes (`dims`, nd of them, plane
// values in all): x[g] = (x[g] + conj(x[-g])) / 2 for every batch (`per` values apart). numpy's
// irfftn reads those planes so; cuFFT's large multi-axis plans read them otherwise. Threads
// along x take the values of a line of the plane (along its last axis, `inner` of them), along
// y the lines of every batch: each value with its partner, found from the line's indices once.
extern "C" __global__ void hermitian_planes(void* x, int f64, const unsigned long long* dims,
                                            unsigned int nd, unsigned long long plane,
                                            unsigned long long m, unsigned int bins,
                                            unsigned long long batch, unsigned long long per) {
    typedef unsigned long long u64;
    const u64 inner = nd ? dims[nd - 1] : 1, rows = plane / inner, lines = batch * rows;
    const u64 j = blockIdx.x * (u64)blockDim.x + threadIdx.x, pj = j ? inner - j : 0;
    if (j >= inner) return;
    for (u64 l = blockIdx.y * (u64)blockDim.y + threadIdx.y; l < lines;
         l += (u64)gridDim.y * blockDim.y) {
        const u64 b = l / rows, row = l - b * rows;
        u64 partner = 0, stride = 1, rest = row;
        for (int a = (int)nd - 2; a >= 0; a--) {
            const u64 d = dims[a], i = rest % d;
            rest /= d;
            partner += (i ? d - i : 0) * stride;
            stride *= d;
        }
        if (partner < row || (partner == row && pj < j)) continue;
        for (unsigned int e = 0; e < bins; e++) {
            const u64 bin = e ? m - 1 : 0;
            const u64 at = b * per + (row * inner + j) * m + bin;
            const u64 to = b * per + (partner * inner + pj) * m + bin;
            if (f64) {
                double2* v = (double2*)x;
                double2 p = v[at], q = v[to];
                double re = (p.x + q.x) * 0.5, im = (p.y - q.y) * 0.5;
                v[at] = make_double2(re, im);
                v[to] = make_double2(re, -im);
            } else {
                float2* v = (float2*)x;
                float2 p = v[at], q = v[to];
                float re = (p.x + q.x) * 0.5f, im = (p.y - q.y) * 0.5f;
                v[at] = make_float2(re, im);
                v[to] = make_float2(re, -im);
            }
        }
    }
}
extern "C" __global__ void scale_f32(float* x, unsigned long long n, double s) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) x[i] = (float)(x[i] * s);
}
extern "C" __global__ void scale_f64(double* x, unsigned long long n, double s) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) x[i] = x[i] * s;
}
"#;

/// What one cuFFT plan computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transform {
    /// Complex to complex; `inverse` is cuFFT's +1 direction.
    C2c { inverse: bool },
    /// Real to complex (forward).
    R2c,
    /// Complex to real (inverse).
    C2r,
}

/// One cuFFT plan of a phase and how it is launched (counts and offsets in elements of the
/// transform's own input and output types).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// What it computes.
    pub transform: Transform,
    /// Lengths of the transformed axes (the real length of the last axis for r2c and c2r).
    pub dims: Vec<usize>,
    /// Distance between consecutive values of one transform (1: contiguous).
    pub stride: usize,
    /// The input's and the output's storage lengths of the transformed axes (cuFFT's inembed
    /// and onembed) where they are not `dims` (None: `dims`).
    pub embed: Option<[Vec<usize>; 2]>,
    /// Distance between consecutive transforms of a batch.
    pub dist: InOut,
    /// Transforms per launch.
    pub batch: usize,
    /// Launches, and the distance between their first elements.
    pub launches: usize,
    pub launch_step: InOut,
}

/// A count in elements of a transform's input and of its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InOut {
    /// In input elements.
    pub input: usize,
    /// In output elements.
    pub output: usize,
}

impl InOut {
    /// The same count on both sides.
    pub fn both(n: usize) -> Self {
        InOut {
            input: n,
            output: n,
        }
    }
}

impl Group {
    /// The plan's element counts passed to cuFFT's advanced layout (None: contiguous, cuFFT's
    /// default layout).
    pub fn strided(&self) -> bool {
        self.stride != 1 || self.embed.is_some()
    }

    /// Whether this is a c2c of 8192 points or more down `batch` columns of `launches` C-order
    /// matrices `[n, stride]` (an outer axis; some rows of one), which runs faster transposed
    /// (see [`Cuda::run_plan`]): on an H200, cuFFT's strided transforms of 8192 points or more
    /// took 3.5-4.9x its contiguous ones, where two tile transposes cost about two copies of
    /// the data (bench/RESULTS.md, 2026-11-26 fourth session).
    pub fn by_rows(&self) -> bool {
        let n = self.dims[0];
        matches!(self.transform, Transform::C2c { .. })
            && self.dims.len() == 1
            && n >= LONG_COLUMNS
            && self.embed.is_none()
            && self.stride >= self.batch
            && self.stride > 1
            && self.dist == InOut::both(1)
            && (self.launches == 1 || self.launch_step == InOut::both(n * self.stride))
    }

    /// The same transforms on the columns transposed, `[batch, n]` for each matrix (see
    /// [`Group::by_rows`]): contiguous rows, all in one launch.
    fn as_rows(&self) -> Group {
        let n = self.dims[0];
        Group {
            stride: 1,
            dist: InOut::both(n),
            batch: self.batch * self.launches,
            launches: 1,
            launch_step: InOut::both(0),
            ..self.clone()
        }
    }

    /// A real transform of one point (a last axis of length 1): `batch` values converted, no
    /// cuFFT plan.
    pub fn one_point(&self) -> bool {
        !matches!(self.transform, Transform::C2c { .. }) && self.dims == [1]
    }
}

/// The transform an axis op computes, and its axis.
fn axis_of(op: &AxisOp, last: usize) -> (usize, Transform) {
    match *op {
        AxisOp::C2c { axis, inverse } => (axis, Transform::C2c { inverse }),
        AxisOp::R2c => (last, Transform::R2c),
        AxisOp::C2r { .. } => (last, Transform::C2r),
    }
}

/// The cuFFT plans of a phase, in order.
pub fn groups(phase: &Phase) -> Vec<Group> {
    if let Some((lo, hi)) = phase.rows {
        return row_groups(phase, hi - lo);
    }
    let seen = Seen::of(phase);
    let last = seen.shape.len() - 1;
    // A real transform of a last axis of length 1 stands alone (see `Group::one_point`).
    let one_point = seen.real_last == 1;
    let apart = seen.apart();
    let ops = apart_aside(&phase.ops, &apart);
    let mut out = Vec::new();
    let mut i = 0;
    while i < ops.len() {
        let (axis, first) = axis_of(&ops[i], last);
        if one_point && is_real(first) {
            out.push(Group {
                transform: first,
                dims: vec![1],
                stride: 1,
                embed: None,
                dist: InOut::both(1),
                batch: seen.shape.iter().product(),
                launches: 1,
                launch_step: InOut::both(0),
            });
            i += 1;
            continue;
        }
        let axes = run_axes(&ops[i..], last, one_point, &apart);
        let take = trailing_prefix(&axes, last);
        if take == 0 {
            out.push(strided(first, axis, &seen.shape));
            i += 1;
            continue;
        }
        out.push(seen.batched(&ops[i..i + take], first, &axes[..take]));
        i += take;
    }
    out
}

/// The plans of a phase on `rows` rows of axis 1 (see [`Phase::on_rows`]), from the first
/// row's start (the caller moves its pointers there). A run of transforms over axis 0 and every
/// axis from 2 on is one plan whose batch is the rows, embedded in the whole planes; over axis 0
/// alone, one strided plan whose batch is the rows' columns; over trailing axes alone, one
/// contiguous plan of the rows launched once per plane.
fn row_groups(phase: &Phase, rows: usize) -> Vec<Group> {
    let seen = Seen::of(phase);
    let (shape, last) = (&seen.shape, seen.shape.len() - 1);
    let one_point = seen.real_last == 1;
    // Elements of one row (complex; an r2c's input in reals), and of a plane's rows.
    let row = |real: bool| match shape.len() {
        2 => 1,
        _ => shape[2..last].iter().product::<usize>() * seen.last(real),
    };
    let pitch = |real: bool| shape[1] * row(real);
    let mut out = Vec::new();
    let mut i = 0;
    while i < phase.ops.len() {
        let mut axes = run_axes(&phase.ops[i..], last, one_point, &[]);
        let run = &phase.ops[i..i + axes.len()];
        i += axes.len();
        let first = axis_of(&run[0], last).1;
        let real_in = first == Transform::R2c;
        axes.sort_unstable();
        let along_0 = axes[0] == 0;
        let trailing: Vec<usize> = axes.iter().copied().filter(|&a| a > 1).collect();
        if along_0 && trailing.first() == Some(&2) {
            // One plan over axis 0 and axes 2.., the rows its batch, each in its whole planes.
            let mut g = seen.batched(run, first, &trailing);
            let embed = |real: bool| {
                let mut e = g.dims.clone();
                *e.last_mut().expect("an axis") = seen.last(real);
                e[0] *= shape[1];
                [vec![shape[0]], e].concat()
            };
            g.embed = Some([embed(real_in), embed(false)]);
            g.dims.insert(0, shape[0]);
            g.dist = InOut {
                input: row(real_in),
                output: row(false),
            };
            g.batch = rows;
            out.push(g);
            continue;
        }
        if !trailing.is_empty() {
            // The trailing axes in each plane: the rows (and the axes before the run) its batch.
            let mut g = seen.batched(run, first, &trailing);
            g.batch = rows * shape[2..trailing[0]].iter().product::<usize>();
            g.launches = shape[0];
            g.launch_step = InOut {
                input: pitch(real_in),
                output: pitch(false),
            };
            out.push(g);
        }
        if along_0 {
            out.push(Group {
                transform: first,
                dims: vec![shape[0]],
                stride: pitch(false),
                embed: None,
                dist: InOut::both(1),
                batch: rows * row(false),
                launches: 1,
                launch_step: InOut::both(0),
            });
        }
    }
    out
}

/// Whether a transform is real (r2c or c2r).
fn is_real(t: Transform) -> bool {
    !matches!(t, Transform::C2c { .. })
}

/// A transform's direction: true for cuFFT's inverse (+1).
fn is_inverse(t: Transform) -> bool {
    match t {
        Transform::C2c { inverse } => inverse,
        Transform::R2c => false,
        Transform::C2r => true,
    }
}

/// The shape a phase's transforms see.
struct Seen {
    /// The complex shape (the last axis halved once an r2c has run).
    shape: Vec<usize>,
    /// The real length of the last axis (a c2r's from the op).
    real_last: usize,
    /// The phase's real transform, if any.
    real: Option<Transform>,
}

impl Seen {
    /// The shape `phase`'s transforms see.
    fn of(phase: &Phase) -> Self {
        let mut shape = phase.shape.clone();
        let last = shape.len() - 1;
        let op = phase.ops.iter().find(|o| !matches!(o, AxisOp::C2c { .. }));
        let real = op.map(|o| axis_of(o, last).1);
        let real_last = match op {
            Some(AxisOp::R2c) => {
                let n = shape[last];
                shape[last] = n / 2 + 1;
                n
            }
            Some(AxisOp::C2r { n }) => *n,
            _ => shape[last],
        };
        Seen {
            shape,
            real_last,
            real,
        }
    }

    /// For each axis, whether it is planned apart from the phase's other axes: where cuFFT
    /// would transform it by Bluestein's algorithm ([`bluestein`]) and it is axis 0 of
    /// [`LONG_COLUMNS`] points or more with rows of 8 values or more (then run on its columns
    /// transposed, see [`Group::by_rows`]), or the real axis of a 2-D r2c. cuFFT's
    /// multi-dimensional plans with such an axis ran 1.1-1.8x slower on an H200 than the plans
    /// made so (`[471405, 48]` c64 c2c 2.94 against 1.70 ms, r2c f32 `[16384, 4099]` 4.60
    /// against 2.73), while other Bluestein axes (narrower rows, a 3-D r2c's real axis, inner
    /// axes) ran as fast or slower planned apart (bench/RESULTS.md, 2026-11-29 twenty-eighth
    /// session).
    fn apart(&self) -> Vec<bool> {
        let last = self.shape.len() - 1;
        let mut marks = vec![false; last + 1];
        if last == 0 {
            return marks;
        }
        let row: usize = self.shape[1..].iter().product();
        marks[0] = self.shape[0] >= LONG_COLUMNS && bluestein(self.shape[0]) && row >= 8;
        marks[last] = last == 1 && self.real == Some(Transform::R2c) && bluestein(self.real_last);
        marks
    }

    /// The length of the last axis: real (an r2c's input) or complex.
    fn last(&self, real: bool) -> usize {
        match real {
            true => self.real_last,
            false => *self.shape.last().expect("an axis"),
        }
    }

    /// One batched plan over the trailing axes `axes` of the transforms `run` (the first
    /// `first`): multi-dimensional from the lowest axis on, real where one of them is.
    fn batched(&self, run: &[AxisOp], first: Transform, axes: &[usize]) -> Group {
        let (shape, real_last) = (&self.shape, self.real_last);
        let last = shape.len() - 1;
        let transform = run
            .iter()
            .map(|o| axis_of(o, last).1)
            .find(|t| is_real(*t))
            .unwrap_or(first);
        let lo = *axes.iter().min().expect("a run");
        let mut dims = shape[lo..].to_vec();
        let complex: usize = dims.iter().product();
        let lines = complex / shape[last];
        let real = lines * real_last;
        *dims.last_mut().expect("an axis") = match transform {
            Transform::C2c { .. } => shape[last],
            _ => real_last,
        };
        let dist = match transform {
            Transform::C2c { .. } => InOut::both(complex),
            Transform::R2c => InOut {
                input: real,
                output: complex,
            },
            Transform::C2r => InOut {
                input: complex,
                output: real,
            },
        };
        Group {
            transform,
            dims,
            stride: 1,
            embed: None,
            dist,
            batch: shape[..lo].iter().product(),
            launches: 1,
            launch_step: InOut::both(0),
        }
    }
}

/// The axes of the run of transforms that `ops` starts: distinct axes, one direction, an r2c
/// only first and a c2r only last, no one-point real transform after the first; an axis
/// marked `apart` in a run of its own.
fn run_axes(ops: &[AxisOp], last: usize, one_point: bool, apart: &[bool]) -> Vec<usize> {
    let (axis, first) = axis_of(&ops[0], last);
    let mut axes = vec![axis];
    let is_apart = |a: usize| apart.get(a) == Some(&true);
    if is_apart(axis) {
        return axes;
    }
    let mut kind = first;
    for op in &ops[1..] {
        let (a, t) = axis_of(op, last);
        // A one-point real transform never joins a run.
        let one_point_real = one_point && is_real(t);
        let ok = !axes.contains(&a)
            && !is_apart(a)
            && is_inverse(t) == is_inverse(first)
            && !matches!(t, Transform::R2c)
            && !matches!(kind, Transform::C2r)
            && !one_point_real;
        if !ok {
            break;
        }
        axes.push(a);
        if t == Transform::C2r {
            kind = t;
        }
    }
    axes
}

/// `ops` with the c2c transforms of the axes planned apart moved out of the others' way (c2c
/// transforms along different axes commute): first where a c2r comes last, last otherwise,
/// so that the others make one plan with the real transform.
fn apart_aside(ops: &[AxisOp], apart: &[bool]) -> Vec<AxisOp> {
    let is_apart = |o: &AxisOp| matches!(*o, AxisOp::C2c { axis, .. } if apart[axis]);
    let (moved, kept): (Vec<AxisOp>, Vec<AxisOp>) = ops.iter().partition(|o| is_apart(o));
    match ops.last() {
        Some(AxisOp::C2r { .. }) => [moved, kept].concat(),
        _ => [kept, moved].concat(),
    }
}

/// How many of a run's first axes are trailing and contiguous (0: none).
fn trailing_prefix(axes: &[usize], last: usize) -> usize {
    let mut take = axes.len();
    while take > 0 {
        let mut sorted = axes[..take].to_vec();
        sorted.sort_unstable();
        if sorted.last() == Some(&last) && sorted.windows(2).all(|w| w[1] == w[0] + 1) {
            break;
        }
        take -= 1;
    }
    take
}

/// One transform over an inner axis of `shape`: strided, launched once per block of the axes
/// before it.
fn strided(transform: Transform, axis: usize, shape: &[usize]) -> Group {
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    let n = shape[axis];
    Group {
        transform,
        dims: vec![n],
        stride: inner,
        embed: None,
        dist: InOut::both(1),
        batch: inner,
        launches: outer,
        launch_step: InOut::both(n * inner),
    }
}

/// A cuFFT plan (none for a one-point real transform; cudarc's, destroyed when dropped) and the
/// group it computes; for a group run on its transposed matrices ([`Group::by_rows`]), the plan
/// is of their rows (`rows`).
pub struct Plan {
    cufft: Option<CudaFft>,
    group: Group,
    rows: Option<Group>,
}

/// The launch of `hermitian_planes` over `lines` lines of `inner` values: a block of 256
/// threads takes up to 256 values of a line (a power of two) and as many lines as fill it.
fn plane_lines(inner: u64, lines: u64) -> LaunchConfig {
    let x = inner.next_power_of_two().min(256);
    let y = 256 / x;
    LaunchConfig {
        grid_dim: (
            inner.div_ceil(x) as u32,
            lines.div_ceil(y).clamp(1, 65535) as u32,
            1,
        ),
        block_dim: (x as u32, y as u32, 1),
        shared_mem_bytes: 0,
    }
}

fn cufft_err(e: cufft::CufftError) -> anyhow::Error {
    anyhow!("cuFFT: {e:?}")
}

/// cuFFT's type for a transform in `precision` (c64 or c128).
fn plan_type(t: Transform, precision: DType) -> sys::cufftType {
    use sys::cufftType::*;
    match (t, precision) {
        (Transform::C2c { .. }, DType::C64) => CUFFT_C2C,
        (Transform::R2c, DType::C64) => CUFFT_R2C,
        (Transform::C2r, DType::C64) => CUFFT_C2R,
        (Transform::C2c { .. }, _) => CUFFT_Z2Z,
        (Transform::R2c, _) => CUFFT_D2Z,
        (Transform::C2r, _) => CUFFT_Z2D,
    }
}

/// Bytes of one value of a transform's input and of its output in `precision` (c64 or c128).
fn element_bytes(t: Transform, precision: DType) -> (usize, usize) {
    let complex = precision.size() as usize;
    match t {
        Transform::R2c => (complex / 2, complex),
        Transform::C2r => (complex, complex / 2),
        Transform::C2c { .. } => (complex, complex),
    }
}

impl Plan {
    /// Makes the plan of `group` on `stream`.
    fn new(group: Group, precision: DType, stream: &Arc<CudaStream>) -> Result<Self> {
        if group.one_point() {
            return Ok(Plan {
                cufft: None,
                group,
                rows: None,
            });
        }
        let rows = group.by_rows().then(|| group.as_rows());
        let planned = rows.as_ref().unwrap_or(&group);
        let int =
            |x: usize| c_int::try_from(x).map_err(|_| anyhow!("FFT too large for cuFFT: {x}"));
        let ints = |v: &[usize]| v.iter().map(|&d| int(d)).collect::<Result<Vec<_>>>();
        let n = ints(&planned.dims)?;
        let [inembed, onembed] = match &planned.embed {
            Some([i, o]) => [ints(i)?, ints(o)?],
            None => [n.clone(), n.clone()],
        };
        let advanced = planned.strided();
        let stride = int(planned.stride)?;
        let cufft = CudaFft::plan_many(
            &n,
            advanced.then_some(&inembed[..]),
            stride,
            int(planned.dist.input)?,
            advanced.then_some(&onembed[..]),
            stride,
            int(planned.dist.output)?,
            plan_type(planned.transform, precision),
            int(planned.batch)?,
            stream.clone(),
        )
        .map_err(cufft_err)?;
        Ok(Plan {
            cufft: Some(cufft),
            group,
            rows,
        })
    }

    /// Runs the cuFFT plan from `src` into `dst` (device addresses), `real` bytes per real value.
    fn exec(&self, handle: sys::cufftHandle, src: u64, dst: u64, precision: DType) -> Result<()> {
        let group = self.rows.as_ref().unwrap_or(&self.group);
        let (ie, oe) = element_bytes(group.transform, precision);
        // cuFFT's directions: -1 forward (e^-i), +1 inverse.
        let dir = |inverse: bool| if inverse { 1 } else { -1 };
        for l in 0..group.launches {
            let i = src + (l * group.launch_step.input * ie) as u64;
            let o = dst + (l * group.launch_step.output * oe) as u64;
            let h = handle;
            // SAFETY: the group's layout stays inside both buffers (sized from the phase).
            unsafe {
                match (group.transform, precision) {
                    (Transform::C2c { inverse }, DType::C64) => {
                        cufft::exec_c2c(h, i as _, o as _, dir(inverse))
                    }
                    (Transform::C2c { inverse }, _) => {
                        cufft::exec_z2z(h, i as _, o as _, dir(inverse))
                    }
                    (Transform::R2c, DType::C64) => cufft::exec_r2c(h, i as _, o as _),
                    (Transform::R2c, _) => cufft::exec_d2z(h, i as _, o as _),
                    (Transform::C2r, DType::C64) => cufft::exec_c2r(h, i as _, o as _),
                    (Transform::C2r, _) => cufft::exec_z2d(h, i as _, o as _),
                }
            }
            .map_err(cufft_err)?;
        }
        Ok(())
    }
}

impl Cuda<'_> {
    /// Runs one plan from `src` into `dst` (device addresses): cuFFT's, or a one-point real
    /// transform's conversion.
    fn run_plan(&self, plan: &Plan, src: u64, dst: u64, precision: DType) -> Result<()> {
        if let (Some(cufft), Some(_)) = (&plan.cufft, &plan.rows) {
            return self.run_by_rows(plan, cufft.handle(), (src, dst), precision);
        }
        if let Some(cufft) = &plan.cufft {
            return plan.exec(cufft.handle(), src, dst, precision);
        }
        let f = match plan.group.transform {
            Transform::R2c => &self.kernels.real_to_complex,
            _ => &self.kernels.complex_to_real,
        };
        let (double, n) = (i32::from(precision != DType::C64), plan.group.batch as u64);
        let (ie, oe) = element_bytes(plan.group.transform, precision);
        let step = plan.group.launch_step;
        for l in 0..plan.group.launches {
            let src = src + (l * step.input * ie) as u64;
            let dst = dst + (l * step.output * oe) as u64;
            let mut launch = self.stream.launch_builder(f);
            launch.arg(&src).arg(&dst).arg(&double).arg(&n);
            // SAFETY: n values of the phase's input and output, inside their buffers.
            unsafe { launch.launch(launch_config(n)) }?;
        }
        Ok(())
    }

    /// Runs a plan down the columns of matrices ([`Group::by_rows`]) on them transposed: from
    /// `src` into the backend's FFT scratch (grown to their size where it is smaller), the rows
    /// plan in place there, back into `dst`; each move a tile copy. Every FFT phase runs on
    /// the main stream, so the scratch is free again when the next one starts.
    fn run_by_rows(
        &self,
        plan: &Plan,
        handle: sys::cufftHandle,
        (src, dst): (u64, u64),
        precision: DType,
    ) -> Result<()> {
        let g = &plan.group;
        let (n, b, pitch, elem) = (g.dims[0], g.batch, g.stride, precision.size() as usize);
        let need = n * b * g.launches * elem;
        let mut scratch = self.fft_scratch.borrow_mut();
        if scratch.as_ref().is_none_or(|s| s.len() < need) {
            // The smaller one goes first, so that both are never held at once.
            *scratch = None;
            // SAFETY: the first tile copy writes every byte a plan reads.
            *scratch = Some(unsafe { self.stream.alloc::<u8>(need) }?);
        }
        let s = scratch.as_ref().map_or(0, |s| s.device_ptr(&self.stream).0);
        // Column c of matrix p, down its n elements, to (and from) row c of p's transpose.
        let there = RunGrid {
            start: (0, 0),
            batches: g.launches,
            outer: (g.launch_step.input, n * b),
            rows: b,
            step: (1, n),
            count: n,
            strides: (pitch, 1),
            more: RunGrid::FLAT,
        };
        self.copy_grid_at(&self.stream, (src, s), &there, elem)?;
        plan.exec(handle, s, s, precision)?;
        let back = RunGrid {
            outer: (n * b, g.launch_step.output),
            step: (n, 1),
            strides: (1, pitch),
            ..there
        };
        self.copy_grid_at(&self.stream, (s, dst), &back, elem)
    }

    /// Makes the input at `x` of a c2r plan `g` Hermitian on the planes that its first and (for
    /// an even real length) last bins along the last axis make with the plan's other axes (of
    /// a 1-D plan: those bins' real parts), as numpy's irfftn reads them (cuFFT's large
    /// multi-axis plans would read them otherwise).
    fn hermitian_planes(&self, g: &Group, x: u64, precision: DType) -> Result<()> {
        let (dims, real) = g.dims.split_at(g.dims.len() - 1);
        let m = (real[0] / 2 + 1) as u64;
        let bins: u32 = if real[0] % 2 == 0 && m > 1 { 2 } else { 1 };
        let plane: u64 = dims.iter().map(|&d| d as u64).product();
        // (A 1-D plan's table is never read, but CUDA allocates nothing empty.)
        let words: Vec<u64> = dims.iter().map(|&d| d as u64).chain([1]).collect();
        let table = self.device_table(&words)?;
        let (nd, batch, per) = (dims.len() as u32, g.batch as u64, g.dist.input as u64);
        let inner = dims.last().map_or(1, |&d| d as u64);
        let double = i32::from(precision != DType::C64);
        let complex = if precision == DType::C64 { 8 } else { 16 };
        for l in 0..g.launches {
            let at = x + (l * g.launch_step.input * complex) as u64;
            let mut launch = self.stream.launch_builder(&self.kernels.hermitian_planes);
            launch
                .arg(&at)
                .arg(&double)
                .arg(&table)
                .arg(&nd)
                .arg(&plane)
                .arg(&m)
                .arg(&bins)
                .arg(&batch)
                .arg(&per);
            // SAFETY: the plan's batches of `per` complex values lie inside the buffer at x.
            unsafe { launch.launch(plane_lines(inner, batch * plane / inner)) }?;
        }
        Ok(())
    }

    /// Runs a local FFT phase: the first plan from `input` into `output`, the others in place
    /// (a c2r, which may overwrite its input, reads a copy), then the scaling.
    pub(super) fn fft_phase(
        &self,
        precision: DType,
        phase: &Phase,
        (input, at_in): (&DevBuf, usize),
        (output, at_out): (&mut DevBuf, usize),
    ) -> Result<()> {
        let (n_in, n_out) = phase.bytes(precision.size() as usize);
        if n_in == 0 || n_out == 0 || phase.rows.is_some_and(|(lo, hi)| lo == hi) {
            // A rank whose slab is empty (fewer rows than ranks) has nothing to transform, and
            // cuFFT takes no plan of zero elements.
            return Ok(());
        }
        anyhow::ensure!(
            at_in + n_in <= input.len && at_out + n_out <= output.len,
            "an FFT phase outside its buffers"
        );
        let key = PlanKey::of(phase, precision);
        let mut cache = self.ffts.borrow_mut();
        let plans = self.cached_plans(&mut cache, precision, key.phase)?;
        let i = input.data.device_ptr(&self.stream).0 + (at_in + key.skip.input) as u64;
        let o = output.data.device_ptr_mut(&self.stream).0 + (at_out + key.skip.output) as u64;
        let c2r = plans.iter().any(|p| p.group.transform == Transform::C2r);
        if plans.is_empty() {
            let n = n_in.min(n_out);
            self.stream.memcpy_dtod(
                &input.data.slice(at_in..at_in + n),
                &mut output.data.slice_mut(at_out..at_out + n),
            )?;
        } else if c2r {
            // cuFFT's c2r may overwrite its input: a tensor of the spec is copied first, the
            // step's own scratch (`spent`) is not.
            let mut copy = None;
            let s = match phase.spent {
                true => i,
                false => {
                    // SAFETY: every byte is written by the copy below before it is read.
                    let mut c = unsafe { self.stream.alloc::<u8>(n_in) }?;
                    self.stream
                        .memcpy_dtod(&input.data.slice(at_in..at_in + n_in), &mut c)?;
                    copy.insert(c).device_ptr_mut(&self.stream).0
                }
            };
            for p in plans {
                let dst = if p.group.transform == Transform::C2r {
                    o
                } else {
                    s
                };
                if p.group.transform == Transform::C2r && !p.group.one_point() {
                    self.hermitian_planes(&p.group, s, precision)?;
                }
                self.run_plan(p, s, dst, precision)?;
            }
        } else {
            for (k, p) in plans.iter().enumerate() {
                self.run_plan(p, if k == 0 { i } else { o }, o, precision)?;
            }
        }
        if let Some(s) = phase.scale {
            self.scale(precision, o, n_out, s)?;
        }
        Ok(())
    }

    /// The plans of `key` in `precision` from `cache`, made and kept there on first use.
    fn cached_plans<'c>(
        &self,
        cache: &'c mut Vec<CachedPlans>,
        precision: DType,
        key: Phase,
    ) -> Result<&'c [Plan]> {
        let at = match cache
            .iter()
            .position(|c| c.precision == precision && c.phase == key)
        {
            Some(at) => at,
            None => {
                let plans = groups(&key)
                    .into_iter()
                    .map(|g| Plan::new(g, precision, &self.stream))
                    .collect::<Result<Vec<_>>>()?;
                cache.push(CachedPlans {
                    precision,
                    phase: key,
                    plans,
                });
                cache.len() - 1
            }
        };
        Ok(&cache[at].plans)
    }

    /// Scales the `bytes` of output at device address `ptr` (reals of `precision`) by `s`.
    fn scale(&self, precision: DType, ptr: u64, bytes: usize, s: f64) -> Result<()> {
        let (f, n) = match precision {
            DType::C64 => (&self.kernels.scale_f32, bytes / 4),
            _ => (&self.kernels.scale_f64, bytes / 8),
        };
        let n = n as u64;
        let mut launch = self.stream.launch_builder(f);
        launch.arg(&ptr).arg(&n).arg(&s);
        // SAFETY: n reals inside the output buffer.
        unsafe { launch.launch(launch_config(n)) }?;
        Ok(())
    }
}

/// The cuFFT plans made for one phase in one precision, kept for the next run of it.
pub struct CachedPlans {
    precision: DType,
    phase: Phase,
    plans: Vec<Plan>,
}

/// What a phase's plans are cached under, and where it starts in its buffers.
struct PlanKey {
    /// The phase; one on some rows becomes the phase on as many rows from row 0 (one plan per
    /// row count).
    phase: Phase,
    /// Bytes from the input's and the output's start to the phase's first row (0 for a whole
    /// phase).
    skip: InOut,
}

impl PlanKey {
    /// The key of `phase` in `precision`: a phase on some rows has its pointers moved to the
    /// first row (an r2c's input row in reals).
    fn of(phase: &Phase, precision: DType) -> Self {
        match phase.rows {
            Some((lo, hi)) => {
                let rows = Phase {
                    rows: Some((0, hi - lo)),
                    ..phase.clone()
                };
                // Bytes over the phase's whole shape, so per row of a plane.
                let (n_in, n_out) = phase.bytes(precision.size() as usize);
                let per_row = |n: usize| n / (phase.shape[0] * phase.shape[1]).max(1);
                PlanKey {
                    skip: InOut {
                        input: lo * per_row(n_in),
                        output: lo * per_row(n_out),
                    },
                    phase: rows,
                }
            }
            None => PlanKey {
                phase: phase.clone(),
                skip: InOut::both(0),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A c2r's planes are made Hermitian value by value, run on the CPU (emulate_fft.cpp: the
    /// kernel's source with the CUDA names it uses stood in for), against the mean of each
    /// value and its partner's conjugate found from the indices directly.
    #[test]
    fn hermitian_planes_emulated_on_the_cpu() {
        let out = crate::backend::cuda::tests::emulated(
            "emulate_fft",
            include_str!("emulate_fft.cpp"),
            ("fft_kernels.cu", KERNELS),
        );
        assert!(out.contains("44 plans, 0 values wrong"), "{out}");
    }

    fn phase(shape: &[usize], ops: Vec<AxisOp>) -> Phase {
        Phase {
            shape: shape.to_vec(),
            ops,
            scale: None,
            rows: None,
            spent: false,
        }
    }

    /// cuFFT's advanced data layout on the host, by naive DFTs: the plans `groups` run as
    /// `fft_phase` runs them (the first from `input` into `output`, the others in place), on
    /// f64 words (a complex value is two). Only forward r2c and c2c, as phases by rows have.
    fn emulate(groups: &[Group], input: &[f64], output: &mut [f64]) {
        use num_complex::Complex64;
        for (k, g) in groups.iter().enumerate() {
            let real_in = g.transform == Transform::R2c;
            let inverse = g.transform == Transform::C2c { inverse: true };
            let mut out_dims = g.dims.clone();
            if real_in {
                *out_dims.last_mut().unwrap() = g.dims.last().unwrap() / 2 + 1;
            }
            let [ein, eout] = g
                .embed
                .clone()
                .unwrap_or([g.dims.clone(), out_dims.clone()]);
            // The flat place of a multi-index in storage of lengths `e`.
            let flat = |i: &[usize], e: &[usize]| i.iter().zip(e).fold(0, |f, (&i, &e)| f * e + i);
            let index = |mut n: usize, dims: &[usize]| {
                let mut i = vec![0; dims.len()];
                for a in (0..dims.len()).rev() {
                    (i[a], n) = (n % dims[a], n / dims[a]);
                }
                i
            };
            let count: usize = g.dims.iter().product();
            let src = if k == 0 {
                input.to_vec()
            } else {
                output.to_vec()
            };
            for l in 0..g.launches {
                for b in 0..g.batch {
                    let at = |l: usize, d: usize, i: usize| l + b * d + i * g.stride;
                    let mut x: Vec<Complex64> = (0..count)
                        .map(|n| {
                            let p = at(
                                l * g.launch_step.input,
                                g.dist.input,
                                flat(&index(n, &g.dims), &ein),
                            );
                            match real_in {
                                true => Complex64::new(src[p], 0.0),
                                false => Complex64::new(src[2 * p], src[2 * p + 1]),
                            }
                        })
                        .collect();
                    // A DFT along each axis in turn.
                    for a in 0..g.dims.len() {
                        let y = x.clone();
                        for (n, v) in x.iter_mut().enumerate() {
                            let i = index(n, &g.dims);
                            *v = (0..g.dims[a])
                                .map(|j| {
                                    let mut m = i.clone();
                                    m[a] = j;
                                    let sign = if inverse { 2.0 } else { -2.0 };
                                    let ph = sign * std::f64::consts::PI * (i[a] * j) as f64
                                        / g.dims[a] as f64;
                                    y[flat(&m, &g.dims)] * Complex64::from_polar(1.0, ph)
                                })
                                .sum();
                        }
                    }
                    for n in 0..out_dims.iter().product() {
                        let i = index(n, &out_dims);
                        let p = at(l * g.launch_step.output, g.dist.output, flat(&i, &eout));
                        let v = x[flat(&i, &g.dims)];
                        (output[2 * p], output[2 * p + 1]) = (v.re, v.im);
                    }
                }
            }
        }
    }

    /// Asserts that `whole`'s result on the CPU is the same through the plans `fft_phase` makes
    /// (emulated): of the whole phase, or of it on each of `splits` of its rows.
    fn plans_compute(whole: &Phase, splits: &[(usize, usize)]) {
        use crate::ops::fft::local::run_phase;
        let (n_in, n_out) = whole.bytes(16);
        let input: Vec<f64> = (0..n_in / 8)
            .map(|i| ((i * 37) % 23) as f64 - 11.0)
            .collect();
        let bytes: Vec<u8> = input.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut want = vec![0u8; n_out];
        run_phase::<f64>(whole, &bytes, &mut want);
        let want: Vec<f64> = (want.chunks_exact(8))
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let mut got = vec![f64::NAN; n_out / 8];
        if splits.is_empty() {
            emulate(&groups(whole), &input, &mut got);
        }
        for &(lo, hi) in splits {
            let key = PlanKey::of(&whole.on_rows(lo, hi).unwrap(), DType::C128);
            let (i, o) = (key.skip.input / 8, key.skip.output / 8);
            emulate(&groups(&key.phase), &input[i..], &mut got[o..]);
        }
        for (g, w) in got.iter().zip(&want) {
            let (shape, ops) = (&whole.shape, &whole.ops);
            assert!((g - w).abs() < 1e-9, "{shape:?} {ops:?}: {g} vs {w}");
        }
    }

    fn c2c(axis: usize, inverse: bool) -> AxisOp {
        AxisOp::C2c { axis, inverse }
    }

    #[test]
    fn phases_by_rows_make_plans_that_compute_the_whole_phase() {
        let cases = [
            (vec![5, 6, 4], vec![c2c(2, false), c2c(0, false)]),
            (vec![5, 6, 4], vec![c2c(2, true), c2c(0, true)]),
            (vec![5, 6, 4], vec![AxisOp::R2c, c2c(0, false)]),
            (vec![3, 5, 7], vec![AxisOp::R2c, c2c(0, false)]),
            (vec![4, 7, 3], vec![c2c(0, true)]),
            (vec![6, 5], vec![c2c(0, false)]),
            (vec![3, 4, 6], vec![c2c(2, false)]),
            (
                vec![3, 2, 4, 5],
                vec![c2c(3, false), c2c(2, false), c2c(0, false)],
            ),
        ];
        for (shape, ops) in cases {
            let whole = phase(&shape, ops);
            let rows = shape[1];
            plans_compute(&whole, &[(0, 1), (1, rows / 2), (rows / 2, rows)]);
        }
    }

    #[test]
    fn whole_phases_make_plans_that_compute_them() {
        let cases = [
            (
                vec![3, 4, 6],
                vec![AxisOp::R2c, c2c(1, false), c2c(0, false)],
            ),
            (vec![3, 4, 5], vec![c2c(1, true)]),
            (
                vec![3, 4, 5],
                vec![c2c(2, false), c2c(1, false), c2c(0, false)],
            ),
            (vec![2, 3, 4, 5], vec![c2c(2, false), c2c(0, false)]),
            (vec![7, 1], vec![AxisOp::R2c, c2c(0, false)]),
        ];
        for (shape, ops) in cases {
            let whole = phase(&shape, ops);
            plans_compute(&whole, &[]);
        }
    }

    #[test]
    fn long_transforms_down_columns_run_on_the_transposed_rows() {
        // A 2-D y-slab's second phase: 8192-point columns, 6 of them: transposed, 6 rows.
        let g = groups(&phase(&[8192, 6], vec![c2c(0, false)]));
        assert!(g[0].by_rows());
        let rows = g[0].as_rows();
        assert_eq!(
            (rows.stride, rows.dist, rows.batch),
            (1, InOut::both(8192), 6)
        );
        // An inner axis: one matrix [8192, 3] for each of the 16 outer blocks, in one plan.
        let g = groups(&phase(&[16, 8192, 3], vec![c2c(1, true)]));
        assert!(g[0].by_rows() && g[0].launches == 16);
        let rows = g[0].as_rows();
        assert_eq!((rows.batch, rows.launches), (48, 1));
        // Shorter columns stay strided; so do real transforms and contiguous lines.
        assert!(!groups(&phase(&[4096, 6], vec![c2c(0, false)]))[0].by_rows());
        // Some rows of a y-slab (2 of its 6 columns): those, transposed.
        let some_rows = phase(&[8192, 6], vec![c2c(0, false)])
            .on_rows(1, 3)
            .unwrap();
        let g = groups(&some_rows);
        assert!(g[0].by_rows() && g[0].as_rows().batch == 2);
        assert!(!groups(&phase(&[6, 8192], vec![c2c(1, false)]))[0].by_rows());
        assert!(!groups(&phase(&[2, 16384], vec![AxisOp::R2c]))[0].by_rows());
    }

    #[test]
    fn a_phase_on_some_rows_is_one_strided_plan_over_their_columns() {
        // The second phase of a y-slab [8, 6, 5] on rows 2..5: along axis 0 (stride 6*5), a
        // batch of 3*5 columns (from row 2's first, where the caller points).
        let along_0 = vec![AxisOp::C2c {
            axis: 0,
            inverse: false,
        }];
        let g = groups(&phase(&[8, 6, 5], along_0).on_rows(2, 5).unwrap());
        assert_eq!(g.len(), 1);
        let g = &g[0];
        assert_eq!(
            (g.dims.clone(), g.stride, g.dist),
            (vec![8], 30, InOut::both(1))
        );
        assert_eq!((g.batch, g.launches), (15, 1));
        // Transforms along other axes, or a scale, do not split by rows.
        let along_1 = vec![AxisOp::C2c {
            axis: 1,
            inverse: false,
        }];
        assert!(phase(&[8, 6, 5], along_1).on_rows(2, 5).is_none());
        // Nor does an r2c of one point (cuFFT would squeeze its axis out of a joint plan).
        let one_point = vec![AxisOp::R2c, c2c(0, false)];
        assert!(phase(&[4, 5, 1], one_point).on_rows(2, 5).is_none());
    }

    #[test]
    fn a_real_transform_of_one_point_stands_alone() {
        // A c2r to a last axis of length 1 after a transform along axis 1 of [3, 9, 1]: cuFFT
        // would squeeze the length-1 axis and take axis 1 for the real one, so the c2c runs on
        // its own (strided) and the c2r is a conversion of all 27 values.
        let g = groups(&phase(
            &[3, 9, 1],
            vec![
                AxisOp::C2c {
                    axis: 1,
                    inverse: true,
                },
                AxisOp::C2r { n: 1 },
            ],
        ));
        assert_eq!(g.len(), 2);
        assert_eq!(
            (g[0].transform, g[0].dims.clone()),
            (Transform::C2c { inverse: true }, vec![9])
        );
        assert!(!g[0].one_point());
        assert!(g[1].one_point() && g[1].batch == 27 && g[1].transform == Transform::C2r);
        // The r2c of the same shape: the conversion first.
        let g = groups(&phase(
            &[3, 9, 1],
            vec![
                AxisOp::R2c,
                AxisOp::C2c {
                    axis: 1,
                    inverse: false,
                },
            ],
        ));
        assert!(g[0].one_point() && g[0].batch == 27 && g[0].transform == Transform::R2c);
        assert_eq!(g[1].dims, vec![9]);
        // Two points or more still make one plan over the trailing axes.
        let g = groups(&phase(
            &[3, 9, 2],
            vec![
                AxisOp::C2c {
                    axis: 1,
                    inverse: true,
                },
                AxisOp::C2r { n: 2 },
            ],
        ));
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].dims, vec![9, 2]);
    }

    #[test]
    fn trailing_axes_make_one_batched_plan() {
        // x-slab of a 3-D c2c: axes 2 then 1 of [4, 6, 8], batch 4.
        let g = groups(&phase(
            &[4, 6, 8],
            vec![
                AxisOp::C2c {
                    axis: 2,
                    inverse: false,
                },
                AxisOp::C2c {
                    axis: 1,
                    inverse: false,
                },
            ],
        ));
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].dims, [6, 8]);
        assert_eq!(
            (g[0].batch, g[0].dist, g[0].stride),
            (4, InOut::both(48), 1)
        );
    }

    #[test]
    fn r2c_with_the_axes_before_it() {
        let g = groups(&phase(
            &[3, 6, 9],
            vec![
                AxisOp::R2c,
                AxisOp::C2c {
                    axis: 1,
                    inverse: false,
                },
            ],
        ));
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].transform, Transform::R2c);
        assert_eq!(g[0].dims, [6, 9]);
        // Real input 6*9 per transform, complex output 6*5.
        assert_eq!(
            (g[0].batch, g[0].dist),
            (
                3,
                InOut {
                    input: 54,
                    output: 30
                }
            )
        );
    }

    #[test]
    fn an_inner_axis_is_strided_and_launched_per_outer_block() {
        // y-slab's second phase on [5, 7, 4]: axis 1, stride 4, 5 launches.
        let g = groups(&phase(
            &[5, 7, 4],
            vec![AxisOp::C2c {
                axis: 1,
                inverse: true,
            }],
        ));
        assert_eq!(g.len(), 1);
        let g = &g[0];
        assert_eq!(g.transform, Transform::C2c { inverse: true });
        assert_eq!((g.stride, g.batch, g.dist), (4, 4, InOut::both(1)));
        assert_eq!((g.launches, g.launch_step), (5, InOut::both(28)));
    }

    #[test]
    fn c2r_after_an_outer_axis_is_two_plans() {
        // Axis 0 inverse (strided, one launch) then c2r along the last axis to length 10.
        let g = groups(&phase(
            &[4, 3, 6],
            vec![
                AxisOp::C2c {
                    axis: 0,
                    inverse: true,
                },
                AxisOp::C2r { n: 10 },
            ],
        ));
        assert_eq!(g.len(), 2);
        assert_eq!((g[0].stride, g[0].batch, g[0].launches), (18, 18, 1));
        assert_eq!(g[1].transform, Transform::C2r);
        assert_eq!(g[1].dims, [10]);
        assert_eq!(
            (g[1].batch, g[1].dist),
            (
                12,
                InOut {
                    input: 6,
                    output: 10
                }
            )
        );
    }

    #[test]
    fn a_long_bluestein_axis_0_is_planned_apart_on_its_rows() {
        // c2c [8209, 6, 4] (8209 prime): axes 2 and 1 in one plan, then axis 0 by rows.
        let all = vec![c2c(2, false), c2c(1, false), c2c(0, false)];
        let g = groups(&phase(&[8209, 6, 4], all.clone()));
        assert_eq!(g.len(), 2);
        assert_eq!((g[0].dims.clone(), g[0].batch), (vec![6, 4], 8209));
        assert!(g[1].by_rows() && g[1].dims == [8209] && g[1].batch == 24);
        // An r2c whose axis 0 is planned apart: the r2c with axis 1 first, whatever the order.
        let r2c = vec![AxisOp::R2c, c2c(0, false), c2c(1, false)];
        let g = groups(&phase(&[8209, 6, 4], r2c));
        assert_eq!(g.len(), 2);
        assert_eq!(
            (g[0].transform, g[0].dims.clone()),
            (Transform::R2c, vec![6, 4])
        );
        assert!(g[1].by_rows() && g[1].batch == 18);
        // Rows of fewer than 8 values: one plan.
        assert_eq!(groups(&phase(&[8209, 2, 3], all.clone())).len(), 1);
        // A c2r: axis 0 first, by rows, then the rest and the c2r in one plan.
        let c2r = vec![c2c(1, true), c2c(0, true), AxisOp::C2r { n: 7 }];
        let g = groups(&phase(&[8209, 6, 4], c2r));
        assert_eq!(g.len(), 2);
        assert!(g[0].by_rows() && g[0].batch == 24);
        assert_eq!(g[1].transform, Transform::C2r);
        assert_eq!((g[1].dims.clone(), g[1].batch), (vec![6, 7], 8209));
        // Shorter, or smooth: one plan, as before.
        assert_eq!(groups(&phase(&[4099, 6, 4], all.clone())).len(), 1);
        assert_eq!(groups(&phase(&[8192 * 3, 6, 4], all)).len(), 1);
    }

    #[test]
    fn a_2d_r2c_of_a_bluestein_length_is_planned_apart() {
        // The r2c of 131 reals on its own, then axis 0 (strided).
        let ops = vec![AxisOp::R2c, c2c(0, false)];
        let g = groups(&phase(&[5, 131], ops.clone()));
        assert_eq!(g.len(), 2);
        assert_eq!(
            (g[0].transform, g[0].dims.clone()),
            (Transform::R2c, vec![131])
        );
        assert_eq!(
            (g[0].batch, g[1].dims.clone(), g[1].stride),
            (5, vec![5], 66)
        );
        plans_compute(&phase(&[5, 131], ops), &[]);
        // A 3-D r2c, and a 2-D c2c, stay one plan.
        let ops = vec![AxisOp::R2c, c2c(1, false), c2c(0, false)];
        assert_eq!(groups(&phase(&[3, 4, 131], ops)).len(), 1);
        let ops = vec![c2c(1, false), c2c(0, false)];
        assert_eq!(groups(&phase(&[5, 131], ops)).len(), 1);
    }

    #[test]
    fn c2c_in_both_directions_is_never_merged() {
        let g = groups(&phase(
            &[4, 4],
            vec![
                AxisOp::C2c {
                    axis: 1,
                    inverse: false,
                },
                AxisOp::C2c {
                    axis: 0,
                    inverse: true,
                },
            ],
        ));
        assert_eq!(g.len(), 2);
    }
}
