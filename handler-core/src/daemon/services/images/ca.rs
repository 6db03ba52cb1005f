//! Extra CA certificates for image builds (B.6, decision 0072): `$HANDLER_BUILD_CA_BUNDLE`, a
//! PEM bundle, checked before each harness or toolbox build and given to the runtime's
//! `image build --ca-bundle` (the build secret `handler-ca-bundle`, never a layer of the image).

use std::path::Path;

use crate::daemon::state::AppState;

/// The build secret id a Containerfile mounts (`RUN --mount=type=secret,id=handler-ca-bundle`).
pub const SECRET_ID: &str = "handler-ca-bundle";

/// Why `$HANDLER_BUILD_CA_BUNDLE` cannot be given to a build; it names the setting and path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CaBundleError {
    /// The file could not be read.
    #[error("HANDLER_BUILD_CA_BUNDLE {}: {source}", path.display())]
    Unreadable {
        /// The bundle's path.
        path: std::path::PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// A private key in it (a bundle is public; a key there is a mistake to refuse).
    #[error("HANDLER_BUILD_CA_BUNDLE {}: holds a private key, not only certificates", .0.display())]
    PrivateKey(std::path::PathBuf),
    /// No certificate in it.
    #[error("HANDLER_BUILD_CA_BUNDLE {}: no PEM certificate in it", .0.display())]
    NoCertificate(std::path::PathBuf),
    /// A comma in its path (the build secret's syntax cannot hold it).
    #[error("HANDLER_BUILD_CA_BUNDLE {}: a path with a comma cannot be a build secret", .0.display())]
    Comma(std::path::PathBuf),
}

/// Whether `text` (the file at `path`) is a bundle a build can be given: at least one PEM
/// certificate, and no private key. Answers the number of certificates.
pub fn checked(path: &Path, text: &str) -> Result<usize, CaBundleError> {
    if text.contains("PRIVATE KEY-----") {
        return Err(CaBundleError::PrivateKey(path.to_path_buf()));
    }
    let n = text.matches("-----BEGIN CERTIFICATE-----").count();
    if n == 0 {
        return Err(CaBundleError::NoCertificate(path.to_path_buf()));
    }
    if path.to_string_lossy().contains(',') {
        return Err(CaBundleError::Comma(path.to_path_buf()));
    }
    Ok(n)
}

/// The bundle for build `id` (none when the setting is unset), checked now and said in its log.
pub fn for_build(app: &AppState, id: &str) -> Result<Option<String>, CaBundleError> {
    let Some(path) = &app.config.build_ca_bundle else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path).map_err(|source| CaBundleError::Unreadable {
        path: path.clone(),
        source,
    })?;
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
        assert_eq!(checked(p, &format!("{CERT}{CERT}")).unwrap(), 2);
        let none = checked(p, "hello").unwrap_err().to_string();
        assert_eq!(
            none,
            "HANDLER_BUILD_CA_BUNDLE /etc/company/ca.pem: no PEM certificate in it"
        );
        let key = checked(p, &format!("{CERT}-----BEGIN PRIVATE KEY-----\nx\n"))
            .unwrap_err()
            .to_string();
        assert!(key.contains("private key"), "{key}");
        assert!(!key.contains("x\n"), "{key}");
        let comma = checked(Path::new("/a,b.pem"), CERT).unwrap_err();
        assert!(matches!(comma, CaBundleError::Comma(_)), "{comma}");
    }
}
