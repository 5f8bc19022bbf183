//! The private bus (`dbus-daemon`) and the fake `org.freedesktop.systemd1` the suite talks
//! to: Manager and one Unit object, recording calls, ending jobs with the results the test
//! chooses, and running the guard unit's command as systemd would.

use super::*;

pub(super) const UNIT: &str = "kubelet.service";
pub(super) const UNIT_PATH: &str = "/org/freedesktop/systemd1/unit/kubelet_2eservice";
pub(super) const GUARD: &str = "nodetopo-kubelet-guard.service";

pub(super) fn dbus_daemon() -> Option<PathBuf> {
    [
        "/usr/bin/dbus-daemon",
        "/bin/dbus-daemon",
        "/usr/local/bin/dbus-daemon",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
}

/// A private bus: `dbus-daemon` with a configuration that allows everything.
pub(super) struct Bus {
    pub(super) child: Child,
    pub(super) address: String,
    pub(super) _dir: tempfile::TempDir,
}

impl Bus {
    pub(super) fn start(daemon: &Path) -> Bus {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("bus.conf");
        fs::write(
            &conf,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={}/bus</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"#,
                dir.path().display()
            ),
        )
        .unwrap();
        let mut child = Command::new(daemon)
            .arg(format!("--config-file={}", conf.display()))
            .args(["--nofork", "--print-address"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let address = line.trim().to_string();
        assert!(address.starts_with("unix:"), "dbus-daemon printed {line:?}");
        Bus {
            child,
            address,
            _dir: dir,
        }
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the fake systemd does and saw.
#[derive(Default)]
pub(super) struct Fake {
    pub(super) calls: Vec<String>,
    pub(super) units: HashSet<String>,
    /// Results of the next jobs, in order (`done` once empty).
    pub(super) results: VecDeque<&'static str>,
    /// Delays of the next jobs' JobRemoved, in order (none once empty).
    pub(super) delays: VecDeque<Duration>,
    pub(super) active: String,
    /// ActiveState reported whatever the jobs did (a unit that fails after starting).
    pub(super) stuck: Option<&'static str>,
    pub(super) next_job: u32,
    /// The guard's process, started from StartTransientUnit's ExecStart as systemd would.
    pub(super) guard: Option<GuardProcess>,
    /// The directory whose `systemctl` (recording its calls) the guard finds first in PATH.
    pub(super) guard_bin: Option<PathBuf>,
    /// SIGKILL the agent (`agent`) when this call arrives (e.g. `StopUnit(kubelet.service`).
    pub(super) kill_at: Option<&'static str>,
    pub(super) agent: Option<u32>,
}

/// The guard's process as the fake systemd runs it. Stopping it (or dropping it while it
/// runs) ends every process of it, the script and its `sleep`, as systemd stops a unit, so
/// no `sleep` outlives the test.
pub(super) struct GuardProcess(pub(super) Child);

impl GuardProcess {
    fn stop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let group = format!("-{}", self.0.id());
            let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        }
        let _ = self.0.wait();
    }
}

impl Drop for GuardProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

pub(super) type Shared = Arc<Mutex<Fake>>;

#[derive(Debug, zbus::DBusError)]
#[zbus(prefix = "org.freedesktop.systemd1")]
pub(super) enum SdError {
    #[zbus(error)]
    ZBus(zbus::Error),
    NoSuchUnit(String),
}

pub(super) struct Manager(pub(super) Shared);

impl Manager {
    fn job(
        &self,
        method: &str,
        name: &str,
        mode: &str,
        emitter: SignalEmitter<'_>,
    ) -> Result<OwnedObjectPath, SdError> {
        let mut f = self.0.lock().unwrap();
        let call = format!("{method}({name},{mode})");
        if let (Some(at), Some(pid)) = (f.kill_at, f.agent) {
            if call.starts_with(at) {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
                f.kill_at = None;
            }
        }
        f.calls.push(call);
        if !f.units.contains(name) {
            return Err(SdError::NoSuchUnit(format!("Unit {name} not found.")));
        }
        if name == GUARD && method == "StopUnit" {
            if let Some(mut g) = f.guard.take() {
                g.stop();
            }
            f.units.remove(name);
        }
        f.next_job += 1;
        let id = f.next_job;
        let result = f.results.pop_front().unwrap_or("done");
        let delay = f.delays.pop_front().unwrap_or_default();
        let after = match (method, result) {
            ("StopUnit", "done") => "inactive",
            (_, "done") => "active",
            _ => "failed",
        };
        let path = format!("/org/freedesktop/systemd1/job/{id}");
        let job = OwnedObjectPath::try_from(path.clone()).map_err(zbus::Error::from)?;
        let (shared, emitter, unit) = (self.0.clone(), emitter.into_owned(), name.to_string());
        let kubelet = name == UNIT;
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if kubelet {
                shared.lock().unwrap().active = after.to_string();
            }
            let p = ObjectPath::try_from(path.as_str()).unwrap();
            let _ = Manager::job_removed(&emitter, id, p, &unit, result).await;
        });
        Ok(job)
    }
}

#[zbus::interface(name = "org.freedesktop.systemd1.Manager")]
impl Manager {
    async fn subscribe(&self) {
        self.0.lock().unwrap().calls.push("Subscribe".into());
    }
    async fn stop_unit(
        &self,
        name: &str,
        mode: &str,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<OwnedObjectPath, SdError> {
        self.job("StopUnit", name, mode, emitter)
    }
    async fn start_unit(
        &self,
        name: &str,
        mode: &str,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<OwnedObjectPath, SdError> {
        self.job("StartUnit", name, mode, emitter)
    }
    async fn restart_unit(
        &self,
        name: &str,
        mode: &str,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<OwnedObjectPath, SdError> {
        self.job("RestartUnit", name, mode, emitter)
    }
    async fn start_transient_unit(
        &self,
        name: &str,
        mode: &str,
        properties: Vec<(String, OwnedValue)>,
        _aux: Vec<(String, Vec<(String, OwnedValue)>)>,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<OwnedObjectPath, SdError> {
        {
            let mut f = self.0.lock().unwrap();
            let mut names: Vec<&str> = properties.iter().map(|(k, _)| k.as_str()).collect();
            names.sort();
            f.calls
                .push(format!("guard properties: {}", names.join(" ")));
            let exec = properties
                .iter()
                .find(|(k, _)| k == "ExecStart")
                .map(|(_, v)| v.try_clone().unwrap());
            let exec: Vec<(String, Vec<String>, bool)> = exec
                .ok_or_else(|| zbus::Error::Failure("no ExecStart".into()))?
                .try_into()
                .map_err(|e| zbus::Error::Failure(format!("ExecStart: {e}")))?;
            let (path, argv, _) = exec.into_iter().next().unwrap();
            let bin = f.guard_bin.clone().unwrap();
            let child = Command::new(path)
                .args(&argv[1..])
                .env(
                    "PATH",
                    format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
                )
                .stdout(Stdio::null())
                // Its own process group, standing for the unit's cgroup: stopping the unit
                // ends the script's `sleep` too, as systemd's KillMode=control-group does.
                .process_group(0)
                .spawn()
                .unwrap();
            f.guard = Some(GuardProcess(child));
            f.units.insert(name.to_string());
            f.calls.push(format!("guard argv: {}", argv[4..].join(" ")));
        }
        // Its job, as systemd's: done once the service runs.
        let (shared, emitter) = (self.0.clone(), emitter);
        Manager(shared).job("StartTransientUnit", name, mode, emitter)
    }
    async fn get_unit(&self, name: &str) -> Result<OwnedObjectPath, SdError> {
        let mut f = self.0.lock().unwrap();
        f.calls.push(format!("GetUnit({name})"));
        if !f.units.contains(name) {
            return Err(SdError::NoSuchUnit(format!("Unit {name} not loaded.")));
        }
        Ok(OwnedObjectPath::try_from(UNIT_PATH).map_err(zbus::Error::from)?)
    }
    #[zbus(signal)]
    async fn job_removed(
        emitter: &SignalEmitter<'_>,
        id: u32,
        job: ObjectPath<'_>,
        unit: &str,
        result: &str,
    ) -> zbus::Result<()>;
}

pub(super) struct Unit(pub(super) Shared);

#[zbus::interface(name = "org.freedesktop.systemd1.Unit")]
impl Unit {
    #[zbus(property)]
    async fn active_state(&self) -> String {
        let f = self.0.lock().unwrap();
        f.stuck.map_or_else(|| f.active.clone(), String::from)
    }
}

pub(super) fn fresh() -> Shared {
    let f = Fake {
        units: [UNIT.to_string()].into_iter().collect(),
        active: "active".into(),
        ..Fake::default()
    };
    Arc::new(Mutex::new(f))
}

/// Serves the fake on the bus under the name org.freedesktop.systemd1.
pub(super) async fn serve_on_bus(address: &str, shared: &Shared) -> zbus::Connection {
    zbus::connection::Builder::address(address)
        .unwrap()
        .name("org.freedesktop.systemd1")
        .unwrap()
        .serve_at("/org/freedesktop/systemd1", Manager(shared.clone()))
        .unwrap()
        .serve_at(UNIT_PATH, Unit(shared.clone()))
        .unwrap()
        .build()
        .await
        .unwrap()
}

/// Serves the fake as systemd's private socket does: direct connections, no bus.
pub(super) async fn serve_direct(socket: &Path, shared: Shared) {
    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            let guid = zbus::Guid::generate();
            let c = zbus::connection::Builder::unix_stream(stream)
                .server(guid)
                .unwrap()
                .p2p()
                .serve_at("/org/freedesktop/systemd1", Manager(shared.clone()))
                .unwrap()
                .serve_at(UNIT_PATH, Unit(shared.clone()))
                .unwrap()
                .build()
                .await;
            if let Ok(c) = c {
                conns.push(c);
            }
        }
    });
}
