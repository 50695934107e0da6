use super::*;
use crate::output::fixtures::{TestDir, sample_manifest};
use chrono::TimeZone;

#[test]
fn round_trips_through_a_run_directory() {
    let root = TestDir::new("manifest-round-trip");
    let run = RunDir::create(root.path().join("job")).unwrap();
    let m = sample_manifest(Checksum::Sha256);
    write_manifest(&run, &m).unwrap();
    let dir = run.commit().unwrap();
    assert_eq!(read_manifest(&dir).unwrap(), m);
}

#[test]
fn field_names_are_the_contracts() {
    let json = serde_json::to_value(sample_manifest(Checksum::Xxh3_64)).unwrap();
    let mut keys: Vec<&str> = json
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "checksum_algorithm",
            "distrun_version",
            "finished_utc",
            "rank_info",
            "ranks",
            "spec",
            "spec_sha256",
            "spec_text",
            "started_utc",
            "steps",
            "tensors"
        ]
    );
    assert_eq!(json["checksum_algorithm"], "xxh3-64");
    assert_eq!(json["ranks"], 2);
    assert_eq!(json["rank_info"][1]["host"], "node1");
    let step = &json["steps"][0];
    assert_eq!(step["time_s"]["median"], 0.0012);
    assert_eq!(step["check"]["passed"], true);
    assert!(
        step.get("algbw_gbs").is_none(),
        "absent options are left out"
    );
    let a = &json["tensors"]["a"];
    assert_eq!(a["dtype"], "f32");
    assert_eq!(a["layout"], "C");
    assert_eq!(a["shards"][1]["file"], "a.rank1.npy");
    assert_eq!(a["file"], "a.npy");
    assert!(a.get("file_checksum").is_some());
}

#[test]
fn a_non_finite_max_error_is_written_by_its_name() {
    let mut m = sample_manifest(Checksum::Xxh3_64);
    for (x, name) in [
        (f64::INFINITY, "inf"),
        (f64::NEG_INFINITY, "-inf"),
        (f64::NAN, "nan"),
    ] {
        m.steps[0].check = Some(CheckRecord {
            passed: false,
            max_error: x,
        });
        let json = serde_json::to_value(&m).unwrap();
        assert_eq!(json["steps"][0]["check"]["max_error"], name);
        let back: Manifest = serde_json::from_value(json).unwrap();
        let read = back.steps[0].check.unwrap().max_error;
        assert!(read == x || (read.is_nan() && x.is_nan()), "{name}: {read}");
    }
    // Older manifests wrote null.
    let mut json = serde_json::to_value(&m).unwrap();
    json["steps"][0]["check"]["max_error"] = serde_json::Value::Null;
    let back: Manifest = serde_json::from_value(json).unwrap();
    assert!(back.steps[0].check.unwrap().max_error.is_nan());
}

#[test]
fn unknown_keys_are_ignored_and_a_missing_manifest_is_an_error() {
    let mut json = serde_json::to_value(sample_manifest(Checksum::Xxh3_64)).unwrap();
    json["added_later"] = serde_json::json!(1);
    let m: Manifest = serde_json::from_value(json).unwrap();
    assert_eq!(m.ranks, 2);
    let root = TestDir::new("manifest-missing");
    let err = read_manifest(root.path()).unwrap_err();
    assert!(err.to_string().contains("manifest.json"));
}

#[test]
fn times_are_rfc3339_utc() {
    let t = Utc.with_ymd_and_hms(2026, 11, 21, 17, 30, 45).unwrap();
    assert_eq!(utc_string(t), "2026-11-21T17:30:45.000Z");
}
