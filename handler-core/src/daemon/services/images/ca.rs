//! Extra CA certificates for image builds (B.6, decision 0072): `$HANDLER_BUILD_CA_BUNDLE`, a
//! PEM bundle, checked before each harness or toolbox build and given to the runtime's
//! `image build --ca-bundle` (the build secret `handler-ca-bundle`, never a layer of the image).

use std::path::Path;

use crate::daemon::state::AppState;

/// The build secret id a Containerfile mounts (`RUN --mount=type=secret,id=handler-ca-bundle`).
pub const SECRET_ID: &str = "handler-ca-bundle";

/// Whether `text` (the file at `path`) is a bundle a build can be given: at least one PEM
/// certificate, and no private key (a bundle is public; a key there is a mistake to refuse).
/// The error names the setting and the path. Answers the number of certificates.
pub fn checked(path: &Path, text: &str) -> Result<usize, String> {
    let named = || format!("HANDLER_BUILD_CA_BUNDLE {}", path.display());
    if text.contains("PRIVATE KEY-----") {
        return Err(format!(
            "{}: holds a private key, not only certificates",
            named()
        ));
    }
    let n = text.matches("-----BEGIN CERTIFICATE-----").count();
    if n == 0 {
        return Err(format!("{}: no PEM certificate in it", named()));
    }
    if path.to_string_lossy().contains(',') {
        return Err(format!(
            "{}: a path with a comma cannot be a build secret",
            named()
        ));
    }
    Ok(n)
}

/// The bundle for build `id` (none when the setting is unset), checked now and said in its log.
pub fn for_build(app: &AppState, id: &str) -> Result<Option<String>, String> {
    let Some(path) = &app.config.build_ca_bundle else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("HANDLER_BUILD_CA_BUNDLE {}: {e}", path.display()))?;
    let n = checked(path, &text)?;
    super::job::log_line(
        app,
        id,
        &format!(
            "extra CAs: {n} certificate(s) of {} given as the build secret {SECRET_ID}",
            path.display()
        ),
    );
    Ok(Some(path.display().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    #[test]
    fn a_bundle_is_certificates_only_and_an_error_names_the_setting_and_path() {
        let p = Path::new("/etc/company/ca.pem");
        assert_eq!(checked(p, &format!("{CERT}{CERT}")), Ok(2));
        let none = checked(p, "hello").unwrap_err();
        assert_eq!(
            none,
            "HANDLER_BUILD_CA_BUNDLE /etc/company/ca.pem: no PEM certificate in it"
        );
        let key = checked(p, &format!("{CERT}-----BEGIN PRIVATE KEY-----\nx\n")).unwrap_err();
        assert!(key.contains("private key"), "{key}");
        assert!(!key.contains("x\n"), "{key}");
        let comma = checked(Path::new("/a,b.pem"), CERT).unwrap_err();
        assert!(comma.contains("comma"), "{comma}");
    }
}
