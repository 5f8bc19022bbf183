//! Certificates and keys for one control plane: a CA, the apiserver's serving certificate
//! (for 127.0.0.1 and localhost) and the service-account token signing key.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};

use crate::{Error, Result};

/// PEM texts (and the CA in DER, for the Rust client).
pub struct Pki {
    /// The CA certificate, PEM.
    pub ca_pem: String,
    /// The CA certificate, DER.
    pub ca_der: Vec<u8>,
    /// The serving certificate, PEM.
    pub serving_cert_pem: String,
    /// The serving key, PKCS#8 PEM.
    pub serving_key_pem: String,
    /// The service-account signing key (ECDSA P-256), PKCS#8 PEM.
    pub service_account_key_pem: String,
    /// Its public key (PKIX PEM), with which the apiserver verifies tokens.
    pub service_account_pub_pem: String,
}

fn pki_err(what: &'static str) -> impl FnOnce(rcgen::Error) -> Error {
    move |source| Error::Pki { what, source }
}

/// Generates a fresh set.
pub fn generate() -> Result<Pki> {
    let ca_key = KeyPair::generate().map_err(pki_err("the CA key"))?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(pki_err("the CA"))?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "nodetopo-test-ca");
    ca_params.distinguished_name = dn;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).map_err(pki_err("the CA"))?;

    let serving_key = KeyPair::generate().map_err(pki_err("the serving key"))?;
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".into()])
        .map_err(pki_err("the serving certificate"))?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "kube-apiserver");
    params.distinguished_name = dn;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let serving = params
        .signed_by(&serving_key, &ca)
        .map_err(pki_err("the serving certificate"))?;

    let sa_key = KeyPair::generate().map_err(pki_err("the service-account key"))?;
    Ok(Pki {
        ca_pem: ca.pem(),
        ca_der: ca.der().to_vec(),
        serving_cert_pem: serving.pem(),
        serving_key_pem: serving_key.serialize_pem(),
        service_account_key_pem: sa_key.serialize_pem(),
        service_account_pub_pem: sa_key.public_key_pem(),
    })
}
