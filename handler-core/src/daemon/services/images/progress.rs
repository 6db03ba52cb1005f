//! Pure: a build's output as its log keeps it (ANSI escapes removed) and podman's `STEP n/m`
//! lines read into the Build's `step`/`steps` (D.4).

/// `line` without ANSI escapes (colours, cursor moves), as text.
pub fn clean(line: &str) -> String {
    String::from_utf8_lossy(&strip_ansi_escapes::strip(line.as_bytes())).into_owned()
}

/// Podman's `STEP n/m: …` (after `clean`): `(n, m)`; none for another line.
pub fn step(line: &str) -> Option<(u32, u32)> {
    let rest = line.trim_start().strip_prefix("STEP ")?;
    let (nm, _) = rest.split_once(':')?;
    let (n, m) = nm.split_once('/')?;
    let (n, m) = (n.parse().ok()?, m.parse().ok()?);
    (n >= 1 && n <= m).then_some((n, m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_read_from_podman_lines() {
        assert_eq!(step("STEP 1/4: FROM localhost/x"), Some((1, 4)));
        assert_eq!(step("STEP 12/12: RUN true"), Some((12, 12)));
        assert_eq!(step("  STEP 3/9: COPY a b"), Some((3, 9)));
        for other in [
            "STEP 0/4: FROM x",
            "STEP 5/4: RUN x",
            "STEP a/4: RUN x",
            "STEP 1/4 RUN x",
            "STEP 1:",
            "--> 1a2b3c",
            "RUN echo STEP 1/2: x",
            "",
        ] {
            assert_eq!(step(other), None, "{other:?}");
        }
    }

    #[test]
    fn ansi_escapes_are_removed() {
        assert_eq!(
            clean("\u{1b}[1;32mSTEP 2/3:\u{1b}[0m RUN x"),
            "STEP 2/3: RUN x"
        );
        assert_eq!(step(&clean("\u{1b}[1mSTEP 2/3: RUN x")), Some((2, 3)));
        assert_eq!(clean("\u{1b}[2K\rCopying blob 1a2b"), "Copying blob 1a2b");
        assert_eq!(clean("plain <b>text</b>"), "plain <b>text</b>");
    }
}
