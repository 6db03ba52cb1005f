//! Parts in a machine (issue 30 item 2, decision 0164), pure: each part's image mounted
//! read-only at `/opt/handler/parts/<id>` (the engine's image mount, or a volume filled from
//! it where the engine takes none: the plan's rule for every image mount), its `bin` put
//! before the image's PATH, and the machine labelled with them (`handler.parts`). The target
//! is never the person's: anything else of the machine's at or under the parts' folder is
//! refused.

use handler_contracts::machine::parts::{MountedPart, PART_ROOT, PARTS_LABEL, target};
use handler_contracts::sandbox::{ImageMount, SandboxSpec};

use crate::error::SpecError;

/// Whether `path` is the parts' folder or inside it.
fn under_parts(path: &str) -> bool {
    path.strip_prefix(PART_ROOT)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// `spec` with `parts` (requirements first) mounted, on its PATH first, and labelled; none:
/// `spec` as it is. Refused: a mount, file or image mount of its own at or under
/// `/opt/handler/parts`, or a part twice.
pub fn with_parts(mut spec: SandboxSpec, parts: &[MountedPart]) -> Result<SandboxSpec, SpecError> {
    if parts.is_empty() {
        return Ok(spec);
    }
    let own = spec
        .mounts
        .iter()
        .map(|m| ("mounts", &m.target))
        .chain(spec.image_mounts.iter().map(|m| ("imageMounts", &m.target)))
        .chain(spec.files.iter().map(|f| ("files", &f.target)));
    for (field, t) in own {
        if under_parts(t) {
            return Err(SpecError::invalid(
                field,
                format!("{t:?} is in {PART_ROOT}, where only parts are mounted"),
            ));
        }
    }
    let mut label = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        if parts[..i].iter().any(|q| q.id == p.id) {
            return Err(SpecError::invalid(
                "parts",
                format!("part {:?} is named twice", p.id),
            ));
        }
        let at = target(&p.id);
        spec.path_prepend.push(format!("{at}/bin"));
        spec.image_mounts.push(ImageMount {
            image: p.image.clone(),
            target: at,
        });
        label.push(format!("{}@{}", p.id, p.version));
    }
    spec.labels.insert(PARTS_LABEL.into(), label.join(","));
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(id: &str, version: &str) -> MountedPart {
        MountedPart {
            id: id.into(),
            version: version.into(),
            image: format!("localhost/handler-part-{id}:{version}-0123456789ab"),
        }
    }

    fn spec() -> SandboxSpec {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "handler.sandbox/v1",
            "name": "handler-m-box",
            "image": "localhost/handler-test-busybox",
            "argv": ["sh"],
            "user": {"mode": "host-user", "home": "/home/agent"},
            "mounts": [{"source": "/srv/w", "target": "/work", "readOnly": false, "kind": "state"}],
            "network": {"mode": "none"},
            "workdir": "/work",
            "labels": {"handler.machine": "box"}
        }))
        .unwrap()
    }

    #[test]
    fn parts_are_image_mounts_first_on_the_path_and_a_label() {
        let s = with_parts(spec(), &[part("node", "20.19.2"), part("codex", "0.5.1")]).unwrap();
        insta::assert_json_snapshot!((&s.image_mounts, &s.path_prepend, &s.labels));
        assert_eq!(with_parts(spec(), &[]).unwrap(), spec());
    }

    #[test]
    fn a_mount_of_its_own_in_the_parts_folder_is_refused() {
        let mut s = spec();
        s.mounts[0].target = "/opt/handler/parts/codex".into();
        let e = with_parts(s, &[part("node", "20")]).unwrap_err();
        assert_eq!(e.field(), "mounts", "{e}");
        let mut s = spec();
        s.mounts[0].target = "/opt/handler/partsx".into();
        assert!(
            with_parts(s, &[part("node", "20")]).is_ok(),
            "a sibling is not inside"
        );
        let e = with_parts(spec(), &[part("node", "20"), part("node", "21")]).unwrap_err();
        assert_eq!(e.field(), "parts");
    }
}
