//! Certificates for TLS tests, made on the spot: a CA, a server certificate for 127.0.0.1, and
//! client certificates for mutual TLS. PEM files in a scratch directory.

use std::path::PathBuf;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use tempfile::TempDir;

pub struct Pki {
    dir: TempDir,
    ca: CertifiedIssuer<'static, KeyPair>,
    pub ca_file: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
}

/// A certificate and its key, as files.
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Pki {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.distinguished_name = name("timer-service test CA");
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key"))
            .expect("CA certificate");
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).expect("write CA");
        let mut pki = Self {
            dir,
            ca,
            ca_file,
            server_cert: PathBuf::new(),
            server_key: PathBuf::new(),
        };
        let server = pki.issue(
            "server",
            &["127.0.0.1", "localhost"],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        pki.server_cert = server.cert;
        pki.server_key = server.key;
        pki
    }

    /// A client certificate for mutual TLS.
    pub fn client(&self, who: &str) -> CertFiles {
        self.issue(who, &[], ExtendedKeyUsagePurpose::ClientAuth)
    }

    fn issue(&self, who: &str, names: &[&str], usage: ExtendedKeyUsagePurpose) -> CertFiles {
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .expect("params");
        params.distinguished_name = name(who);
        params.extended_key_usages = vec![usage];
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.ca).expect("certificate");
        let files = CertFiles {
            cert: self.dir.path().join(format!("{who}.pem")),
            key: self.dir.path().join(format!("{who}-key.pem")),
        };
        std::fs::write(&files.cert, cert.pem()).expect("write certificate");
        std::fs::write(&files.key, key.serialize_pem()).expect("write key");
        files
    }
}

fn name(common_name: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    name
}
