//! The addons Handler ships (built in, and the catalog's): each Containerfile's image holds the
//! addon's tree at its root, because the image is mounted at `/opt/addons/NAME` (G.4). A tree
//! copied to `/opt/addons/NAME` inside the image would land at
//! `/opt/addons/NAME/opt/addons/NAME` in every sandbox, and its check would fail.

use std::path::{Path, PathBuf};

fn shipped() -> Vec<(String, PathBuf)> {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
    let mut out = Vec::new();
    for group in ["addons", "catalog"] {
        for e in std::fs::read_dir(data.join(group)).unwrap().flatten() {
            let file = e.path().join("Containerfile");
            if file.is_file() {
                out.push((e.file_name().to_string_lossy().into_owned(), file));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_shipped_addon_image_holds_its_tree_at_its_root() {
    let all = shipped();
    assert!(
        all.iter().any(|(n, _)| n == "miniapp") && all.len() >= 3,
        "{all:?}"
    );
    for (name, file) in all {
        let text = std::fs::read_to_string(&file).unwrap();
        let stages: Vec<&str> = text
            .lines()
            .filter(|l| l.trim_start().to_ascii_uppercase().starts_with("FROM "))
            .collect();
        assert_eq!(
            stages.last().map(|l| l.trim()),
            Some("FROM scratch"),
            "{}: the last stage is FROM scratch",
            file.display()
        );
        let last = text.rsplit_once("FROM scratch").unwrap().1;
        let copies: Vec<&str> = last
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("COPY"))
            .collect();
        assert_eq!(
            copies,
            [format!("COPY --from=build /opt/addons/{name}/ /").as_str()],
            "{}: the image's root is the addon's tree",
            file.display()
        );
    }
}
