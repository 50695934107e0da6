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
