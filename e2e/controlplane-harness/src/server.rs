//! One running etcd + kube-apiserver.

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::AuthInfo;
use kube::{Client, Config};

use crate::binaries::{binaries, Binaries};
use crate::pki::{self, Pki};
use crate::process;
use crate::{Error, Result};

/// The admin's bearer token (a static token in group `system:masters`; loopback only).
const ADMIN_USER: &str = "nodetopo-test-admin";
/// The issuer of service-account tokens.
pub const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// How long to wait for etcd or the apiserver to become ready.
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// A running control plane. Dropping it kills both processes; if the thread is panicking
/// (a failed test), the end of the apiserver log is printed first.
pub struct ControlPlane {
    dir: tempfile::TempDir,
    bins: Binaries,
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    etcd_url: String,
    apiserver_port: u16,
    pki: Pki,
    admin_token: String,
    kubeconfig: PathBuf,
    etcd: Mutex<Option<Child>>,
    apiserver: Mutex<Option<Child>>,
    /// Wall time from spawning etcd to the apiserver's `/readyz` answering `ok`.
    pub start_time: Duration,
}

fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| Error::io("binding 127.0.0.1:0", e))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| Error::io("reading a free port", e))
}

fn write(path: &Path, text: &str) -> Result<()> {
    fs::write(path, text).map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

/// The last `lines` lines of a log file.
pub fn tail(path: &Path, lines: usize) -> String {
    let Ok(mut f) = fs::File::open(path) else {
        return format!("({} not readable)", path.display());
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(256 * 1024)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

impl ControlPlane {
    /// Starts a new control plane. `Ok(None)`: skipped (no Go, not required); the one
    /// `SKIPPED: ...` line has been printed.
    pub fn start() -> Result<Option<Self>> {
        let started = Self::start_quiet();
        if matches!(started, Ok(None)) {
            println!("{}", crate::binaries::skip_line());
        }
        started
    }

    fn start_quiet() -> Result<Option<Self>> {
        let Some(bins) = binaries()? else {
            return Ok(None);
        };
        // The ports are found free, released, then handed to etcd and kube-apiserver: another
        // process (a parallel test's kubelet or control plane) may take one in between. Such
        // a start is tried again with new ports, twice at most.
        let mut tries = 0;
        loop {
            match Self::start_with(bins.clone()) {
                Err(e) if tries < 2 && e.to_string().contains("address already in use") => {
                    tries += 1;
                    eprintln!("control plane: a port was taken before it was bound, starting again with new ports: {e}");
                }
                started => return started.map(Some),
            }
        }
    }

    /// The control plane shared by every test of this test binary, started on first use.
    /// `Ok(None)`: skipped. The processes die with the test process.
    pub fn shared() -> Result<Option<&'static Self>> {
        let shared = SHARED.get_or_init(|| {
            let started = Self::start_quiet().map_err(|e| e.to_string());
            if matches!(started, Ok(Some(_))) {
                // Statics are never dropped: stop the processes and remove the temp dir
                // when the test binary exits.
                // SAFETY: registers a plain extern "C" function with no captured state.
                unsafe {
                    libc::atexit(stop_shared);
                }
                // Remember whether any test of this binary failed, to print the server log.
                let previous = std::panic::take_hook();
                std::panic::set_hook(Box::new(move |info| {
                    SHARED_FAILED.store(true, std::sync::atomic::Ordering::SeqCst);
                    previous(info);
                }));
            }
            started
        });
        match shared {
            Ok(Some(cp)) => Ok(Some(cp)),
            Ok(None) => {
                println!("{}", crate::binaries::skip_line());
                Ok(None)
            }
            Err(e) => Err(Error::Other(e.clone())),
        }
    }

    fn start_with(bins: Binaries) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("nodetopo-controlplane-")
            .tempdir()
            .map_err(|e| Error::io("creating the control plane's temp dir", e))?;
        let pki = pki::generate()?;
        let admin_token = format!("admin-{:016x}", rand_u64());
        let root = dir.path();
        write(&root.join("ca.crt"), &pki.ca_pem)?;
        write(&root.join("serving.crt"), &pki.serving_cert_pem)?;
        write(&root.join("serving.key"), &pki.serving_key_pem)?;
        write(&root.join("sa.key"), &pki.service_account_key_pem)?;
        write(&root.join("sa.pub"), &pki.service_account_pub_pem)?;
        // Besides the admin: the controller manager, the scheduler and the local node's
        // kubelet, each as the user its bootstrap RBAC role (or the Node authorizer) expects.
        let mut tokens = format!("{admin_token},{ADMIN_USER},{ADMIN_USER},\"system:masters\"\n");
        for (user, group) in component_users() {
            tokens.push_str(&format!(
                "{},{user},{user},\"{group}\"\n",
                component_token(&admin_token, &user)
            ));
        }
        write(&root.join("tokens.csv"), &tokens)?;
        let (etcd_port, peer_port, apiserver_port) = (free_port()?, free_port()?, free_port()?);
        let url = format!("https://127.0.0.1:{apiserver_port}");
        let kubeconfig = root.join("kubeconfig");
        write(
            &kubeconfig,
            &kubeconfig_text(&url, &pki.ca_pem, ADMIN_USER, &admin_token),
        )?;
        let mut cp = Self {
            etcd_url: format!("http://127.0.0.1:{etcd_port}"),
            bins,
            url,
            apiserver_port,
            pki,
            admin_token,
            kubeconfig,
            etcd: Mutex::new(None),
            apiserver: Mutex::new(None),
            start_time: Duration::ZERO,
            dir,
        };
        let started = Instant::now();
        cp.start_etcd(peer_port)?;
        cp.start_apiserver()?;
        cp.start_time = started.elapsed();
        Ok(cp)
    }

    fn log(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn log_file(&self, name: &str) -> Result<(fs::File, fs::File)> {
        let path = self.log(name);
        let f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
        let g = f
            .try_clone()
            .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
        Ok((f, g))
    }

    fn start_etcd(&self, peer_port: u16) -> Result<()> {
        let (out, err) = self.log_file("etcd.log")?;
        let mut cmd = Command::new(&self.bins.etcd);
        cmd.arg(format!(
            "--data-dir={}",
            self.dir.path().join("etcd").display()
        ))
        .arg(format!("--listen-client-url={}", self.etcd_url))
        .arg(format!("--listen-peer-url=http://127.0.0.1:{peer_port}"))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
        let child = process::spawn(cmd, "etcd")?;
        *self.etcd.lock().map_err(poisoned)? = Some(child);
        // The apiserver retries etcd itself; wait only until etcd says it is ready, so that a
        // broken etcd is reported as such.
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if fs::read_to_string(self.log("etcd.log")).is_ok_and(|t| t.contains("etcd: ready")) {
                return Ok(());
            }
            if let Some(status) = self.exited(&self.etcd)? {
                return Err(self.start_error("etcd", format!("exited with {status}"), "etcd.log"));
            }
            if Instant::now() > deadline {
                return Err(self.start_error(
                    "etcd",
                    format!("not ready after {START_TIMEOUT:?}"),
                    "etcd.log",
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn apiserver_args(&self) -> Vec<String> {
        let d = self.dir.path();
        let p = |n: &str| d.join(n).display().to_string();
        vec![
            format!("--etcd-servers={}", self.etcd_url),
            format!("--secure-port={}", self.apiserver_port),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--cert-dir={}", p("certs")),
            format!("--tls-cert-file={}", p("serving.crt")),
            format!("--tls-private-key-file={}", p("serving.key")),
            format!("--token-auth-file={}", p("tokens.csv")),
            // Node first, as kubeadm does: the local node's kubelet acts as system:node:NAME.
            "--authorization-mode=Node,RBAC".into(),
            format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"),
            format!("--service-account-key-file={}", p("sa.pub")),
            format!("--service-account-signing-key-file={}", p("sa.key")),
            "--service-cluster-ip-range=10.96.0.0/16".into(),
            // ValidatingAdmissionPolicy is on by default since 1.30; name it so that a change
            // of defaults cannot silently drop it.
            "--enable-admission-plugins=ValidatingAdmissionPolicy,NodeRestriction".into(),
            "--allow-privileged=true".into(),
            "--profiling=false".into(),
            // One apiserver on loopback; nothing serves the kubernetes Service (no kube-proxy):
            // skip the endpoints reconciler.
            "--endpoint-reconciler-type=none".into(),
            "--v=0".into(),
        ]
    }

    fn start_apiserver(&self) -> Result<()> {
        let (out, err) = self.log_file("apiserver.log")?;
        let mut cmd = Command::new(&self.bins.kube_apiserver);
        cmd.args(self.apiserver_args())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        let child = process::spawn(cmd, "kube-apiserver")?;
        *self.apiserver.lock().map_err(poisoned)? = Some(child);
        self.wait_ready()
    }

    /// Polls `/readyz` on a private runtime (callers may be inside a tokio runtime).
    fn wait_ready(&self) -> Result<()> {
        let config = self.config_with_token(&self.admin_token);
        let deadline = Instant::now() + START_TIMEOUT;
        let outcome = std::thread::scope(|s| {
            s.spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| Error::io("building a tokio runtime", e))?;
                rt.block_on(async {
                    let client = Client::try_from(config)
                        .map_err(|e| Error::kube("building the admin client", e))?;
                    loop {
                        let req = http::Request::get("/readyz")
                            .body(Vec::new())
                            .map_err(|e| Error::Other(format!("building /readyz request: {e}")))?;
                        let last = match client.request_text(req).await {
                            Ok(t) if t.trim() == "ok" => return Ok(()),
                            Ok(t) => t,
                            Err(e) => e.to_string(),
                        };
                        if let Some(status) = self.exited(&self.apiserver)? {
                            return Err(Error::Other(format!("exited with {status}")));
                        }
                        if Instant::now() > deadline {
                            return Err(Error::Other(format!(
                                "/readyz not ok after {START_TIMEOUT:?}; last answer: {last}"
                            )));
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                })
            })
            .join()
            .map_err(|_| Error::Other("the readiness thread panicked".into()))?
        });
        outcome.map_err(|e| self.start_error("kube-apiserver", e.to_string(), "apiserver.log"))
    }

    fn exited(&self, child: &Mutex<Option<Child>>) -> Result<Option<std::process::ExitStatus>> {
        let mut guard = child.lock().map_err(poisoned)?;
        match guard.as_mut() {
            Some(c) => c
                .try_wait()
                .map_err(|e| Error::io("waiting for a child", e)),
            None => Ok(None),
        }
    }

    fn start_error(&self, component: &'static str, message: String, log: &str) -> Error {
        Error::Start {
            component,
            message,
            log: self.log(log).display().to_string(),
            tail: tail(&self.log(log), 60),
        }
    }

    /// Stops the apiserver (SIGTERM, then SIGKILL after 10 s) and starts it again on the same
    /// port, against the same etcd. Returns how long the new one took to become ready.
    pub fn restart_apiserver(&self) -> Result<Duration> {
        if let Some(mut child) = self.apiserver.lock().map_err(poisoned)?.take() {
            process::signal_group(&child, libc::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            process::kill_group(&mut child);
        }
        let t = Instant::now();
        self.start_apiserver()?;
        Ok(t.elapsed())
    }

    fn config_with_token(&self, token: &str) -> Config {
        let mut config = Config::new(self.url.parse().expect("loopback URL parses"));
        config.root_cert = Some(vec![self.pki.ca_der.clone()]);
        config.auth_info = AuthInfo {
            token: Some(token.to_string().into()),
            ..AuthInfo::default()
        };
        config.read_timeout = Some(Duration::from_secs(60));
        config
    }

    /// A client acting as the cluster admin (group `system:masters`).
    pub fn client(&self) -> Client {
        Client::try_from(self.config_with_token(&self.admin_token))
            .expect("a client from a static config builds")
    }

    /// A client authenticating with `token` (e.g. from [`ControlPlane::service_account_token`]).
    pub fn client_with_token(&self, token: &str) -> Client {
        Client::try_from(self.config_with_token(token))
            .expect("a client from a static config builds")
    }

    /// A kubeconfig file for the admin (for kubectl, helm and the nodetopo binaries).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// A kubeconfig for one of the component users (`system:kube-controller-manager`,
    /// `system:kube-scheduler`, `system:node:`[`LOCAL_NODE`]), written into the temp dir.
    pub fn component_kubeconfig(&self, user: &str) -> Result<PathBuf> {
        if !component_users().iter().any(|(u, _)| u == user) {
            return Err(Error::Other(format!("no static token for user {user}")));
        }
        let name = user.replace(':', "-");
        self.kubeconfig_for_token(&name, &component_token(&self.admin_token, user))
    }

    /// The CA certificate (PEM file) and the service-account signing key (PEM file).
    pub fn ca_and_signing_key(&self) -> (PathBuf, PathBuf) {
        (
            self.dir.path().join("ca.crt"),
            self.dir.path().join("sa.key"),
        )
    }

    /// The apiserver's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.apiserver_port
    }

    /// Writes a kubeconfig for `token` into the temp dir and returns its path.
    pub fn kubeconfig_for_token(&self, name: &str, token: &str) -> Result<PathBuf> {
        let path = self.dir.path().join(format!("kubeconfig-{name}"));
        write(
            &path,
            &kubeconfig_text(&self.url, &self.pki.ca_pem, name, token),
        )?;
        Ok(path)
    }

    /// The control plane's temp dir (logs, certificates, etcd data).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The last `lines` lines of the apiserver log.
    pub fn apiserver_log_tail(&self, lines: usize) -> String {
        tail(&self.log("apiserver.log"), lines)
    }

    /// Applies every CRD that `nodetopo-crds` generates (server-side apply; idempotent, so
    /// every test may call it) and waits until each is Established. Returns the CRDs as the
    /// server stored them.
    pub async fn install_crds(&self) -> Result<Vec<CustomResourceDefinition>> {
        let api: Api<CustomResourceDefinition> = Api::all(self.client());
        let mut out = Vec::new();
        for crd in nodetopo_crds::generate::crds() {
            out.push(apply_crd_established(&api, &crd).await?);
        }
        Ok(out)
    }

    /// Applies the upstream NodeResourceTopology CRD vendored in the chart
    /// (`charts/nodetopo/files/noderesourcetopology-api/crd.yaml`) and waits until it is
    /// Established.
    pub async fn install_nrt_crd(&self) -> Result<()> {
        let path =
            crate::repo_root().join("charts/nodetopo/files/noderesourcetopology-api/crd.yaml");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::Other(format!("{}: {e}", path.display())))?;
        let crd: CustomResourceDefinition = serde_yaml::from_str(&text)
            .map_err(|e| Error::Other(format!("{}: {e}", path.display())))?;
        let api: Api<CustomResourceDefinition> = Api::all(self.client());
        apply_crd_established(&api, &crd).await?;
        Ok(())
    }

    /// Creates `namespace` and ServiceAccount `name` in it if absent (no controller-manager
    /// runs here, so nothing else creates them).
    pub async fn ensure_service_account(&self, namespace: &str, name: &str) -> Result<()> {
        let client = self.client();
        let ns: Api<Namespace> = Api::all(client.clone());
        let obj: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": namespace}
        }))
        .map_err(|e| Error::Other(e.to_string()))?;
        match ns.create(&PostParams::default(), &obj).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(Error::kube(format!("creating namespace {namespace}"), e)),
        }
        let sas: Api<ServiceAccount> = Api::namespaced(client, namespace);
        let sa: ServiceAccount = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": namespace}
        }))
        .map_err(|e| Error::Other(e.to_string()))?;
        match sas.create(&PostParams::default(), &sa).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(Error::kube(
                format!("creating serviceaccount {namespace}/{name}"),
                e,
            )),
        }
    }

    /// A token for ServiceAccount `namespace/name` through the TokenRequest API, optionally
    /// bound to a Pod `(name, uid)` in the same namespace (the apiserver then adds the pod's
    /// node to the token's claims when the pod has `spec.nodeName` and that Node exists).
    pub async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
        bound_pod: Option<(&str, &str)>,
    ) -> Result<String> {
        let sas: Api<ServiceAccount> = Api::namespaced(self.client(), namespace);
        let req = TokenRequest {
            spec: TokenRequestSpec {
                audiences: vec![SERVICE_ACCOUNT_ISSUER.to_string()],
                expiration_seconds: Some(3600),
                bound_object_ref: bound_pod.map(|(pod, uid)| BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(pod.into()),
                    uid: Some(uid.into()),
                }),
            },
            ..TokenRequest::default()
        };
        let resp = sas
            .create_token_request(name, &PostParams::default(), &req)
            .await
            .map_err(|e| Error::kube(format!("TokenRequest for {namespace}/{name}"), e))?;
        resp.status
            .map(|s| s.token)
            .ok_or_else(|| Error::Other(format!("TokenRequest for {namespace}/{name}: no status")))
    }
}

static SHARED: OnceLock<Result<Option<ControlPlane>, String>> = OnceLock::new();

static SHARED_FAILED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn stop_shared() {
    if let Some(Ok(Some(cp))) = SHARED.get() {
        if SHARED_FAILED.load(std::sync::atomic::Ordering::SeqCst) {
            eprintln!(
                "--- a test failed: shared kube-apiserver log ({}), last 80 lines ---\n{}",
                cp.log("apiserver.log").display(),
                cp.apiserver_log_tail(80)
            );
        }
        cp.stop();
        let _ = fs::remove_dir_all(cp.dir.path());
    }
}

fn poisoned<T>(_: std::sync::PoisonError<T>) -> Error {
    Error::Other("control-plane process lock poisoned".into())
}

/// The claims of a JWT (no signature check: the apiserver did that when it issued it).
pub fn jwt_claims(token: &str) -> Result<serde_json::Value> {
    use base64::Engine as _;
    let payload = token
        .split('.')
        .nth(1)
        .ok_or_else(|| Error::Other("token is not a JWT (no payload part)".into()))?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .map_err(|e| Error::Other(format!("token payload is not base64url: {e}")))?;
    serde_json::from_slice(&bytes).map_err(|e| Error::Other(format!("token payload: {e}")))
}

fn kubeconfig_text(url: &str, ca_pem: &str, user: &str, token: &str) -> String {
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: nodetopo-test\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\nusers:\n- name: {user}\n  user:\n    token: {token}\ncontexts:\n- name: nodetopo-test\n  context:\n    cluster: nodetopo-test\n    user: {user}\ncurrent-context: nodetopo-test\n"
    )
}

/// The node name of the local node's kubelet (see [`crate::node`]): the apiserver knows a
/// static token for `system:node:<this>`.
pub const LOCAL_NODE: &str = "nodetopo-node";

/// The component users that get a static token: (user, group).
fn component_users() -> [(String, &'static str); 3] {
    [
        (
            "system:kube-controller-manager".to_string(),
            "system:authenticated",
        ),
        ("system:kube-scheduler".to_string(), "system:authenticated"),
        (format!("system:node:{LOCAL_NODE}"), "system:nodes"),
    ]
}

/// The static token of a component user: derived from the admin token, so one file holds
/// them all and nothing else needs to remember them.
fn component_token(admin_token: &str, user: &str) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(format!("{admin_token}/{user}").as_bytes());
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// A random value for the admin token, from the kernel.
fn rand_u64() -> u64 {
    let mut b = [0u8; 8];
    if let Ok(mut f) = fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut b);
    }
    u64::from_le_bytes(b) ^ u64::from(std::process::id()) << 32
}

impl ControlPlane {
    /// Kills both processes (idempotent).
    fn stop(&self) {
        for child in [&self.apiserver, &self.etcd] {
            if let Ok(mut g) = child.lock() {
                if let Some(mut c) = g.take() {
                    process::kill_group(&mut c);
                }
            }
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- kube-apiserver log ({}), last 80 lines ---\n{}",
                self.log("apiserver.log").display(),
                self.apiserver_log_tail(80)
            );
        }
        self.stop();
    }
}

/// Applies `crd` (server-side apply, forced, field manager `nodetopo-controlplane-tests`)
/// and waits up to 30 s until the server reports it Established. Returns the CRD as the
/// server stored it.
async fn apply_crd_established(
    api: &Api<CustomResourceDefinition>,
    crd: &CustomResourceDefinition,
) -> Result<CustomResourceDefinition> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    let pp = PatchParams::apply("nodetopo-controlplane-tests").force();
    api.patch(&name, &pp, &Patch::Apply(crd))
        .await
        .map_err(|e| Error::kube(format!("applying CRD {name}"), e))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = api
            .get(&name)
            .await
            .map_err(|e| Error::kube(format!("reading CRD {name}"), e))?;
        let established = got
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
        if established {
            return Ok(got);
        }
        if Instant::now() > deadline {
            return Err(Error::Other(format!(
                "CRD {name} not Established after 30s: {:?}",
                got.status
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
