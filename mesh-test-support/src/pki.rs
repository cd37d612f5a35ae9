//! The test kit's certificates: a CA made for one test, a server certificate it signs for
//! loopback (`127.0.0.1`, `localhost`), and a client certificate it signs (for mTLS).
//!
//! Shared by every crate's tests that need TLS (the store's, the bus's, the host's and the
//! controller's), never copied.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// A CA and the certificates it signed, as PEM files in their own directory (removed on drop).
/// Keys are written `0600`.
pub struct TestPki {
    /// Holds the files.
    pub dir: tempfile::TempDir,
    /// The CA's certificate: what a client trusts.
    pub ca_file: PathBuf,
    /// The CA's key.
    pub ca_key: PathBuf,
    /// The server's certificate (SANs `127.0.0.1`, `localhost`).
    pub server_cert: PathBuf,
    /// The server's key.
    pub server_key: PathBuf,
    /// A client certificate (CN `mesh-test-client`).
    pub client_cert: PathBuf,
    /// The client's key.
    pub client_key: PathBuf,
}

fn write(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

impl TestPki {
    /// Makes a fresh CA (named `name`, so two in one test are told apart) and its two
    /// certificates.
    pub fn new(name: &str) -> TestPki {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
            IsCa, KeyPair, KeyUsagePurpose,
        };
        let dir = tempfile::Builder::new()
            .prefix("mesh-pki-")
            .tempdir()
            .expect("temp dir");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("mesh test CA {name}"));
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate().unwrap();
        let ca_key_pem = ca_key.serialize_pem();
        let ca = CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();

        let mut server_params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
        server_params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_key = KeyPair::generate().unwrap();
        let server_cert = server_params.signed_by(&server_key, &ca).unwrap();

        let mut client_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        client_params
            .distinguished_name
            .push(DnType::CommonName, "mesh-test-client");
        client_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client_key = KeyPair::generate().unwrap();
        let client_cert = client_params.signed_by(&client_key, &ca).unwrap();

        let path = |name: &str| dir.path().join(name);
        write(&path("ca.pem"), &ca.pem(), 0o644);
        write(&path("ca-key.pem"), &ca_key_pem, 0o600);
        write(&path("server.pem"), &server_cert.pem(), 0o644);
        write(&path("server-key.pem"), &server_key.serialize_pem(), 0o600);
        write(&path("client.pem"), &client_cert.pem(), 0o644);
        write(&path("client-key.pem"), &client_key.serialize_pem(), 0o600);
        TestPki {
            ca_file: path("ca.pem"),
            ca_key: path("ca-key.pem"),
            server_cert: path("server.pem"),
            server_key: path("server-key.pem"),
            client_cert: path("client.pem"),
            client_key: path("client-key.pem"),
            dir,
        }
    }

    /// The same set made by the book's recipe, `contrib/tls/mesh-certs`, run with `openssl` as
    /// an operator runs it (`ca`, `server localhost 127.0.0.1`, `client mesh-test-client`): so
    /// a test proves the recipe gives certificates the bus and the registry serve with.
    ///
    /// # Panics
    /// When the recipe fails, with what it said.
    pub fn from_recipe() -> TestPki {
        let dir = tempfile::Builder::new()
            .prefix("mesh-pki-recipe-")
            .tempdir()
            .expect("temp dir");
        for args in [
            &["ca"][..],
            &["server", "localhost", "127.0.0.1"],
            &["client", "mesh-test-client"],
        ] {
            let output = run_recipe(dir.path(), args);
            assert!(
                output.status.success(),
                "mesh-certs {args:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let path = |name: &str| dir.path().join(name);
        TestPki {
            ca_file: path("ca.pem"),
            ca_key: path("ca.key"),
            server_cert: path("localhost.pem"),
            server_key: path("localhost.key"),
            client_cert: path("mesh-test-client.pem"),
            client_key: path("mesh-test-client.key"),
            dir,
        }
    }
}

/// Runs the book's certificate recipe (`contrib/tls/mesh-certs DIR ARGS…`).
pub fn run_recipe(dir: &Path, args: &[&str]) -> std::process::Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../contrib/tls/mesh-certs");
    std::process::Command::new(&script)
        .arg(dir)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()))
}
