//! Pure: the addon check (G.4). The probe is a shell script run in the toolbox with the new
//! addon image mounted at `/opt/addons/<name>` (no PATH appended, so `command -v` sees the
//! toolbox's own PATH); it prints one fact a line, and [`verdict`] says what of G.4 they break:
//! bin/ holds exactly `commands` (each executable), none of them on the toolbox's PATH, the
//! version file readable, and `check` (if any) exits 0 with bin/ appended to PATH.

use std::collections::BTreeSet;

/// The probe, run as `sh -c PROBE probe <mount path> [check argv…]`.
pub const PROBE: &str = r#"d="$1"; shift
if [ -d "$d/bin" ]; then
  for f in "$d"/bin/* "$d"/bin/.[!.]*; do
    if [ -e "$f" ] || [ -L "$f" ]; then
      if [ -f "$f" ] && [ -x "$f" ]; then echo "bin x ${f##*/}"; else echo "bin - ${f##*/}"; fi
      w=$(command -v "${f##*/}" 2>/dev/null) && echo "onpath ${f##*/} $w"
    fi
  done
else echo "nobin"; fi
if [ -f "$d/version" ] && [ -r "$d/version" ]; then
  v=$(head -n 1 "$d/version"); echo "version $v"
else echo "noversion"; fi
if [ "$#" -gt 0 ]; then
  out=$(PATH="$PATH:$d/bin" "$@" 2>&1 </dev/null); rc=$?
  printf '%s\n' "$out" | while IFS= read -r l; do echo "check-out $l"; done
  echo "check-exit $rc"
else echo "check-none"; fi
echo "probe-end"
"#;

/// What the probe printed, read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Probe {
    /// bin/ exists.
    pub bin_dir: bool,
    /// bin/'s entries: name → a regular executable file.
    pub bin: Vec<(String, bool)>,
    /// Commands the toolbox's own PATH already has: name, where.
    pub on_path: Vec<(String, String)>,
    /// The version file's first line (none: not readable).
    pub version: Option<String>,
    /// `check`'s output lines.
    pub check_out: Vec<String>,
    /// `check`'s exit status (none: no check ran).
    pub check_exit: Option<i32>,
    /// The probe got to its end.
    pub ended: bool,
}

/// Reads the probe's output.
pub fn read(out: &str) -> Probe {
    let mut p = Probe {
        bin_dir: true,
        ..Probe::default()
    };
    for l in out.lines() {
        let (word, rest) = l.split_once(' ').unwrap_or((l, ""));
        match word {
            "nobin" => p.bin_dir = false,
            "bin" => {
                let (x, name) = rest.split_once(' ').unwrap_or(("-", rest));
                p.bin.push((name.to_string(), x == "x"));
            }
            "onpath" => {
                let (name, w) = rest.split_once(' ').unwrap_or((rest, ""));
                p.on_path.push((name.to_string(), w.to_string()));
            }
            "version" => p.version = Some(rest.trim().to_string()),
            "check-out" => p.check_out.push(rest.to_string()),
            "check-exit" => p.check_exit = rest.trim().parse().ok().or(Some(-1)),
            "probe-end" => p.ended = true,
            _ => {}
        }
    }
    p
}

/// G.4's check over what the probe saw: the version, or every reason it fails.
pub fn verdict(
    commands: &[String],
    check: Option<&[String]>,
    p: &Probe,
) -> Result<String, Vec<String>> {
    if !p.ended {
        return Err(vec!["the probe did not run to its end".into()]);
    }
    let mut why = Vec::new();
    if !p.bin_dir {
        why.push("the image has no bin/".into());
    }
    let want: BTreeSet<&str> = commands.iter().map(String::as_str).collect();
    let have: BTreeSet<&str> = p.bin.iter().map(|(n, _)| n.as_str()).collect();
    for c in want.difference(&have) {
        why.push(format!("bin/ lacks the command {c:?}"));
    }
    for c in have.difference(&want) {
        why.push(format!("bin/ holds {c:?}, which is not in commands"));
    }
    for (n, x) in &p.bin {
        if !x && want.contains(n.as_str()) {
            why.push(format!("bin/{n} is not an executable file"));
        }
    }
    for (n, w) in &p.on_path {
        if want.contains(n.as_str()) {
            why.push(format!("{n:?} is also on the toolbox's own PATH ({w})"));
        }
    }
    let version = p.version.clone().filter(|v| !v.is_empty());
    if version.is_none() {
        why.push("its version file is missing, unreadable or empty".into());
    }
    if let Some(argv) = check {
        match p.check_exit {
            None => why.push(format!("check {argv:?} did not run")),
            Some(0) => {}
            Some(code) => why.push(format!("check {argv:?} exited {code}")),
        }
    }
    match (why.is_empty(), version) {
        (true, Some(v)) => Ok(v),
        _ => Err(why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmds() -> Vec<String> {
        vec!["hello".into(), "hola".into()]
    }

    #[test]
    fn a_good_addon_passes_with_its_version() {
        let out =
            "bin x hello\nbin x hola\nversion Hello 1.2\ncheck-out hi\ncheck-exit 0\nprobe-end\n";
        let p = read(out);
        let check = vec!["hello".to_string(), "--version".into()];
        assert_eq!(verdict(&cmds(), Some(&check), &p), Ok("Hello 1.2".into()));
        assert_eq!(
            verdict(
                &cmds(),
                None,
                &read("bin x hello\nbin x hola\nversion 1\ncheck-none\nprobe-end")
            ),
            Ok("1".into())
        );
    }

    #[test]
    fn every_failure_is_named() {
        let check = vec!["hello".to_string(), "--version".into()];
        let cases = [
            (
                "extra",
                "bin x hello\nbin x hola\nbin x extra\nversion 1\ncheck-exit 0\nprobe-end\n",
            ),
            (
                "missing and not executable",
                "bin - hello\nversion 1\ncheck-exit 0\nprobe-end\n",
            ),
            (
                "on the toolbox's PATH",
                "bin x hello\nonpath hello /bin/hello\nbin x hola\nversion 1\ncheck-exit 0\nprobe-end\n",
            ),
            (
                "no version",
                "bin x hello\nbin x hola\nnoversion\ncheck-exit 0\nprobe-end\n",
            ),
            (
                "check fails",
                "bin x hello\nbin x hola\nversion 1\ncheck-out boom\ncheck-exit 1\nprobe-end\n",
            ),
            (
                "check did not run",
                "bin x hello\nbin x hola\nversion 1\ncheck-none\nprobe-end\n",
            ),
            ("no bin", "nobin\nversion 1\ncheck-exit 127\nprobe-end\n"),
            ("cut short", "bin x hello\n"),
        ];
        let all: Vec<(&str, Result<String, Vec<String>>)> = cases
            .iter()
            .map(|(what, out)| (*what, verdict(&cmds(), Some(&check), &read(out))))
            .collect();
        insta::assert_debug_snapshot!(all);
    }
}
