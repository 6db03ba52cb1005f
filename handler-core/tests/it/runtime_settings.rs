//! `set-egress`/`set-allow` at the same time on one instance (A.4): every change is kept (none
//! lost to another's read-modify-write) and the settings file is whole at every moment (the
//! proxy reads it for each request).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use handler_contracts::AllowEntry;
use handler_contracts::sandbox::Enforcement;
use handler_core::runtime::egress::launch::{Change, READY_MARKER, apply_change_within};
use handler_sandbox::egress::Settings;

fn instance(dir: &Path) {
    std::fs::create_dir_all(dir.join("egress")).unwrap();
    std::fs::write(dir.join("launcher"), "1 1 boot\n").unwrap();
    std::fs::write(dir.join("egress").join(READY_MARKER), "").unwrap();
    handler_core::runtime::egress::write_settings(
        &dir.join("egress/settings.json"),
        &Settings {
            enforcement: Enforcement::Enforce,
            allow: vec![],
        },
    )
    .unwrap();
}

#[test]
fn concurrent_set_allow_and_set_egress_never_lose_a_change_nor_tear_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sb");
    instance(&dir);
    let file = dir.join("egress/settings.json");

    // A reader standing for the proxy: the file always parses.
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (stop, file) = (stop.clone(), file.clone());
        std::thread::spawn(move || {
            let mut reads = 0u32;
            while !stop.load(Ordering::SeqCst) {
                let text = std::fs::read_to_string(&file).expect("the settings file is there");
                Settings::parse(&text).unwrap_or_else(|e| panic!("torn settings {text:?}: {e}"));
                reads += 1;
            }
            reads
        })
    };

    for round in 0..60u32 {
        let mode = if round % 2 == 0 {
            Enforcement::LogOnly
        } else {
            Enforcement::Enforce
        };
        let entry = AllowEntry::parse(&format!("h{round}.example:443")).unwrap();
        let barrier = Arc::new(Barrier::new(4));
        let mut threads = Vec::new();
        for i in 0..4 {
            let (barrier, dir) = (barrier.clone(), dir.clone());
            let change = if i % 2 == 0 {
                Change::Enforcement(mode)
            } else {
                Change::Allow(vec![entry.clone()])
            };
            threads.push(std::thread::spawn(move || {
                barrier.wait();
                apply_change_within(&dir, "sb", change, Duration::from_secs(5))
            }));
        }
        for t in threads {
            t.join()
                .unwrap()
                .unwrap_or_else(|e| panic!("round {round}: a change failed: {e}"));
        }
        let s = Settings::parse(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(s.enforcement, mode, "round {round}: set-egress lost");
        assert_eq!(s.allow, vec![entry], "round {round}: set-allow lost");
    }
    stop.store(true, Ordering::SeqCst);
    assert!(reader.join().unwrap() > 0);
    // No temporary file left beside it.
    let left: Vec<String> = std::fs::read_dir(dir.join("egress"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
