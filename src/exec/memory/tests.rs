use super::*;
use crate::spec::load_str;

fn plan(text: &str, ranks: u64) -> Plan {
    let loaded = load_str("m.toml", text, Default::default()).unwrap();
    crate::plan::plan(&loaded, ranks).unwrap()
}

const HUGE: &str = "[job]\nname = \"huge\"\n\
    [tensors.small]\nshape = [4]\ndtype = \"f32\"\ninit = \"ones\"\n\
    [tensors.a]\nshape = [1000000, 1000000]\ndtype = \"f64\"\ndistribution = { slab = 0 }\n\
    init = \"zeros\"\n[[steps]]\nop = \"barrier\"\n";

#[test]
fn a_plan_larger_than_the_host_is_refused_with_its_numbers() {
    let p = plan(HUGE, 2);
    let room = Room::Host {
        available: 64 << 30,
        ranks_here: 2,
    };
    let why = shortfall(&p, 1, "node7", room).unwrap();
    assert!(
        why.starts_with("rank 1: the plan needs 3.6 TiB per rank"),
        "{why}"
    );
    assert!(why.contains("tensor `a`: 3.6 TiB on this rank"), "{why}");
    assert!(why.contains("7.3 TiB for 2 rank(s) on node7, which has 64.0 GiB available"));
    // The same plan over enough ranks fits.
    let spread = plan(HUGE, 1024);
    assert_eq!(shortfall(&spread, 5, "node7", room), None);
}

#[test]
fn on_a_gpu_the_heap_already_taken_is_not_counted_twice() {
    let p = plan(HUGE, 4096);
    let peak = p.peak_bytes_per_rank;
    let room = |free, heap_taken| Room::Device { free, heap_taken };
    assert_eq!(shortfall(&p, 0, "h", room(peak, 0)), None);
    assert_eq!(shortfall(&p, 0, "h", room(peak - 100, 100)), None);
    let why = shortfall(&p, 0, "h", room(peak - 101, 100)).unwrap();
    assert!(why.contains("for its GPU on h, which has"), "{why}");
}

#[test]
fn available_memory_is_read_from_meminfo() {
    let text = "MemTotal:       32000000 kB\nMemFree:  100 kB\nMemAvailable:   24000000 kB\n";
    assert_eq!(mem_available(text), Some(24_000_000 * 1024));
    assert_eq!(mem_available("MemTotal: 1 kB\n"), None);
    // This machine has some.
    assert!(host_available().is_some_and(|b| b > 0));
}

#[test]
fn a_plan_for_auto_counts_the_windows_of_the_gpus_it_took() {
    let spec = |device: &str| {
        format!(
            "[job]\nname = \"w\"\n[runtime]\ndevice = \"{device}\"\n[tensors.x]\n\
             shape = [64, 48, 40]\ndtype = \"c64\"\ndistribution = {{ slab = 0 }}\ninit = \"ones\"\n\
             [[steps]]\nop = \"fft\"\ninput = \"x\"\nout = \"y\"\n"
        )
    };
    let (auto, cuda, cpu) = (
        plan(&spec("auto"), 3),
        plan(&spec("cuda"), 3),
        plan(&spec("cpu"), 3),
    );
    let run = |p: &Plan| p.steps[0].memory.run.clone();
    assert_eq!(run(&auto), run(&cpu));
    assert!(
        run(&cuda)[0] > run(&cpu)[0],
        "an FFT's transpose puts within windows"
    );
    let mut on_gpus = auto.clone();
    on_gpus.on_device(crate::spec::model::Device::Cuda);
    assert_eq!(run(&on_gpus), run(&cuda));
    assert_eq!(on_gpus.peak_bytes_per_rank, cuda.peak_bytes_per_rank);
    let mut on_cpus = auto.clone();
    on_cpus.on_device(crate::spec::model::Device::Cpu);
    assert_eq!(run(&on_cpus), run(&cpu));
    // One rank puts nothing, wherever it runs.
    let mut alone = plan(&spec("auto"), 1);
    let before = run(&alone);
    alone.on_device(crate::spec::model::Device::Cuda);
    assert_eq!(run(&alone), before);
}

#[test]
fn each_window_counts_in_whole_granules() {
    use crate::plan::memory::WINDOW_GRANULE;
    let devices = |text: &dyn Fn(&str) -> String, ranks| {
        (plan(&text("cuda"), ranks), plan(&text("cpu"), ranks))
    };
    // A checked FFT back to x-slabs: the transposed slab and the way back, and its inverse's
    // two: four windows of a few KiB each, a granule each.
    let fft = |device: &str| {
        format!(
            "[job]\nname = \"w\"\n[runtime]\ndevice = \"{device}\"\n[tensors.x]\n\
             shape = [24, 20, 16]\ndtype = \"c64\"\ndistribution = {{ slab = 0 }}\ninit = \"ones\"\n\
             [[steps]]\nop = \"fft\"\ninput = \"x\"\nout = \"y\"\ncheck = true\n"
        )
    };
    let (gpu, cpu) = devices(&fft, 3);
    for r in 0..3 {
        assert_eq!(
            gpu.steps[0].memory.run[r] - cpu.steps[0].memory.run[r],
            4 * WINDOW_GRANULE
        );
    }
    // An all-gather GEMM in rounds over 4 ranks: a window for each of 3 rounds' pieces, and
    // one for their signals.
    let ring = |device: &str| {
        format!(
            "[job]\nname = \"r\"\n[runtime]\ndevice = \"{device}\"\n\
             [tensors.a]\nshape = [64, 32]\ndtype = \"f32\"\ndistribution = {{ slab = 0 }}\n\
             init = \"ones\"\n\
             [tensors.b]\nshape = [32, 48]\ndtype = \"f32\"\ndistribution = {{ slab = 1 }}\n\
             init = \"ones\"\n\
             [[steps]]\nop = \"matmul\"\na = \"a\"\nb = \"b\"\nout = \"c\"\n\
             algorithm = \"ag_gemm\"\npipeline = \"rounds\"\n"
        )
    };
    let (gpu, cpu) = devices(&ring, 4);
    assert_eq!(
        gpu.steps[0].memory.run[0] - cpu.steps[0].memory.run[0],
        4 * WINDOW_GRANULE,
        "{:?}",
        gpu.steps[0].matmul
    );
    // Held to the end of the run, besides: the barriers' words' window.
    assert_eq!(
        gpu.peak_bytes_per_rank - cpu.peak_bytes_per_rank,
        5 * WINDOW_GRANULE
    );
    // Gathered whole in one exchange, nothing lands by puts.
    let (gpu, cpu) = devices(&|d| ring(d).replace("\"rounds\"", "\"whole\""), 4);
    assert_eq!(gpu.steps[0].memory.run, cpu.steps[0].memory.run);
}
