//! The kubelet as a systemd unit, driven over D-Bus (`org.freedesktop.systemd1`), the default
//! restarter of `apply` and of the daemon's actuation.
//!
//! Each action is one job: `Subscribe` (once per connection, so that systemd sends job
//! signals to us), a match on `JobRemoved`, then `StopUnit` / `StartUnit` / `RestartUnit`
//! `(unit, "replace")` on `/org/freedesktop/systemd1`, and a wait, bounded by the timeout,
//! for the `JobRemoved` of the job path that call returned. The job's result must be `done`;
//! anything else (`failed`, `canceled`, `timeout`, `dependency`, `skipped`) is an error
//! naming the unit, the method and the result. Health is the unit's `ActiveState` being
//! `active` (`GetUnit`, then the `org.freedesktop.systemd1.Unit` property).
//!
//! The bus is the system bus by default; systemd's private socket `/run/systemd/private` is a
//! direct (peer-to-peer) connection without `Hello` and is used with `p2p`. Every error names
//! the bus address and the D-Bus error (for example `org.freedesktop.systemd1.NoSuchUnit`).

use std::time::Duration;

use futures::StreamExt as _;
use zbus::blocking::connection::Builder;
use zbus::blocking::{Connection, Proxy};
use zbus::zvariant::OwnedObjectPath;

use crate::actuation::guard::{GuardPlan, GUARD_STOP_TIMEOUT, GUARD_UNIT};
use crate::actuation::KubeletService;

/// The system bus socket (the default address).
pub const SYSTEM_BUS: &str = "unix:path=/run/dbus/system_bus_socket";
/// The default bound on one job (and on one method call).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

const DEST: &str = "org.freedesktop.systemd1";
const PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";
const UNIT: &str = "org.freedesktop.systemd1.Unit";
const ALREADY_SUBSCRIBED: &str = "org.freedesktop.systemd1.AlreadySubscribed";
const NO_SUCH_UNIT: &str = "org.freedesktop.systemd1.NoSuchUnit";

/// The kubelet unit, driven through systemd's D-Bus API.
pub struct SystemdBus {
    unit: String,
    address: String,
    p2p: bool,
    timeout: Duration,
    conn: Option<Connection>,
    subscribed: bool,
    rt: Option<tokio::runtime::Runtime>,
    guard: Option<GuardPlan>,
}

impl SystemdBus {
    /// A restarter for `unit` on the bus at `address` (a D-Bus address such as
    /// [`SYSTEM_BUS`]); `p2p` for a direct connection to systemd (its private socket
    /// `unix:path=/run/systemd/private`). Nothing
    /// is connected before the first action.
    pub fn new(unit: &str, address: &str, p2p: bool, timeout: Duration) -> anyhow::Result<Self> {
        if unit.trim().is_empty() {
            anyhow::bail!("the systemd unit name is empty");
        }
        if timeout.is_zero() {
            anyhow::bail!("the systemd job timeout must be positive");
        }
        // Checked now so that a malformed address is a usage error, not a failed apply.
        zbus::Address::try_from(address)
            .map_err(|e| anyhow::anyhow!("the D-Bus address {address:?} is not valid: {e}"))?;
        Ok(SystemdBus {
            unit: unit.to_string(),
            address: address.to_string(),
            p2p,
            timeout,
            conn: None,
            subscribed: false,
            rt: None,
            guard: None,
        })
    }

    /// With the guard `plan` armed before each apply's stop ([`super::guard`]); `None`:
    /// no guard.
    pub fn with_guard(mut self, plan: Option<GuardPlan>) -> Self {
        self.guard = plan;
        self
    }

    fn at(&self) -> String {
        format!(
            "systemd over D-Bus at {}{}",
            self.address,
            if self.p2p { " (direct)" } else { "" }
        )
    }

    fn connection(&mut self) -> Result<Connection, String> {
        if let Some(c) = &self.conn {
            return Ok(c.clone());
        }
        let mut b = Builder::address(self.address.as_str())
            .map_err(|e| format!("{}: bad address: {e}", self.at()))?
            .method_timeout(self.timeout);
        if self.p2p {
            b = b.p2p();
        }
        let c = b
            .build()
            .map_err(|e| format!("{}: cannot connect: {e}", self.at()))?;
        self.conn = Some(c.clone());
        self.subscribed = false;
        Ok(c)
    }

    /// Forgets the connection after an error, so that the next action reconnects (the bus
    /// may have restarted).
    fn reset(&mut self) {
        self.conn = None;
        self.subscribed = false;
    }

    fn manager(&mut self) -> Result<Proxy<'static>, String> {
        let conn = self.connection()?;
        Proxy::new(&conn, DEST, PATH, MANAGER)
            .map_err(|e| format!("{}: the Manager object: {e}", self.at()))
    }

    fn runtime(&mut self) -> Result<&tokio::runtime::Runtime, String> {
        if self.rt.is_none() {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .map_err(|e| format!("{}: a runtime for the job wait: {e}", self.at()))?;
            self.rt = Some(rt);
        }
        self.rt
            .as_ref()
            .ok_or_else(|| format!("{}: no runtime for the job wait", self.at()))
    }

    /// Runs `method(unit, "replace")` and waits for its job to be removed with `done`.
    fn job(&mut self, method: &str) -> Result<(), String> {
        let unit = self.unit.clone();
        self.job_with(method, &unit, &(unit.as_str(), "replace"))
    }

    /// Runs `method(body)` for `unit` and waits for its job to be removed with `done`.
    fn job_with<B>(&mut self, method: &str, unit: &str, body: &B) -> Result<(), String>
    where
        B: serde::Serialize + zbus::zvariant::DynamicType,
    {
        let r = self.job_once(method, unit, body);
        if r.is_err() {
            self.reset();
        }
        r
    }

    fn job_once<B>(&mut self, method: &str, unit: &str, body: &B) -> Result<(), String>
    where
        B: serde::Serialize + zbus::zvariant::DynamicType,
    {
        let manager = self.manager()?;
        let at = self.at();
        let unit = unit.to_string();
        if !self.subscribed {
            match manager.call_method("Subscribe", &()) {
                Ok(_) => {}
                Err(zbus::Error::MethodError(name, _, _))
                    if name.as_str() == ALREADY_SUBSCRIBED => {}
                Err(e) => return Err(format!("{at}: Subscribe failed: {e}")),
            }
            self.subscribed = true;
        }
        let timeout = self.timeout;
        let inner = manager.inner().clone();
        let rt = self.runtime()?;
        rt.block_on(async {
            // The match is in place before the job exists: its JobRemoved cannot be missed.
            let mut removed = inner
                .receive_signal("JobRemoved")
                .await
                .map_err(|e| format!("{at}: cannot watch JobRemoved: {e}"))?;
            let job: OwnedObjectPath = inner
                .call(method, body)
                .await
                .map_err(|e| format!("{at}: {method}({unit}) failed: {e}"))?;
            let wait = async {
                while let Some(msg) = removed.next().await {
                    let body = msg.body();
                    let Ok((_id, path, _unit, result)) =
                        body.deserialize::<(u32, OwnedObjectPath, String, String)>()
                    else {
                        continue;
                    };
                    if path == job {
                        return Ok(result);
                    }
                }
                Err(format!(
                    "{at}: {method}({unit}): the connection closed before job {} ended",
                    job.as_str()
                ))
            };
            let result = tokio::time::timeout(timeout, wait).await.map_err(|_| {
                format!(
                    "{at}: {method}({unit}): job {} did not end within {} s",
                    job.as_str(),
                    timeout.as_secs_f64()
                )
            })??;
            if result == "done" {
                Ok(())
            } else {
                Err(format!(
                    "{at}: {method}({unit}) ended with job result {result:?} (not \"done\")"
                ))
            }
        })
    }

    /// The unit's `ActiveState`.
    pub fn active_state(&mut self) -> Result<String, String> {
        let r = (|| {
            let manager = self.manager()?;
            let at = self.at();
            let unit = self.unit.clone();
            let path: OwnedObjectPath = manager
                .call("GetUnit", &(unit.as_str(),))
                .map_err(|e| format!("{at}: GetUnit({unit}) failed: {e}"))?;
            let conn = self.connection()?;
            let props = zbus::blocking::proxy::Builder::<Proxy<'_>>::new(&conn)
                .destination(DEST)
                .and_then(|b| b.path(path.clone()))
                .and_then(|b| b.interface(UNIT))
                .map(|b| b.cache_properties(zbus::proxy::CacheProperties::No))
                .and_then(|b| b.build())
                .map_err(|e| format!("{at}: the unit object {}: {e}", path.as_str()))?;
            props.get_property::<String>("ActiveState").map_err(|e| {
                format!(
                    "{at}: reading ActiveState of {unit} ({}) failed: {e}",
                    path.as_str()
                )
            })
        })();
        if r.is_err() {
            self.reset();
        }
        r
    }
}

impl SystemdBus {
    /// Stops `GUARD_UNIT` (a guard of an earlier apply, or ours); a unit systemd does not
    /// know (never armed, or already ended and collected) is fine.
    fn stop_guard(&mut self) -> Result<(), String> {
        // An answer (NoSuchUnit) is no reason to drop the connection.
        match self.job_once("StopUnit", GUARD_UNIT, &(GUARD_UNIT, "replace")) {
            Err(e) if e.contains(NO_SUCH_UNIT) => Ok(()),
            Err(e) => {
                self.reset();
                Err(e)
            }
            Ok(()) => Ok(()),
        }
    }

    fn start_guard(&mut self, plan: &GuardPlan) -> Result<(), String> {
        use zbus::zvariant::Value;
        let argv = plan.argv(&self.unit);
        let exec = vec![(argv[0].clone(), argv.clone(), false)];
        let props: Vec<(&str, Value<'_>)> = vec![
            (
                "Description",
                Value::from(format!(
                    "nodetopo: start {} (restoring its files if the apply was not verified) unless the agent finishes its apply within {} s",
                    self.unit,
                    plan.delay.as_secs()
                )),
            ),
            ("Type", Value::from("simple")),
            ("ExecStart", Value::new(exec)),
            (
                "TimeoutStopUSec",
                Value::from(GUARD_STOP_TIMEOUT.as_micros() as u64),
            ),
            ("CollectMode", Value::from("inactive-or-failed")),
        ];
        let aux: Vec<(&str, Vec<(&str, Value<'_>)>)> = Vec::new();
        self.job_with(
            "StartTransientUnit",
            GUARD_UNIT,
            &(GUARD_UNIT, "replace", props, aux),
        )
    }
}

impl KubeletService for SystemdBus {
    fn arm_guard(&mut self) -> Result<bool, String> {
        let Some(plan) = self.guard.clone() else {
            return Ok(false);
        };
        self.stop_guard()?;
        self.start_guard(&plan)?;
        Ok(true)
    }
    fn disarm_guard(&mut self) -> Result<(), String> {
        if self.guard.is_none() {
            return Ok(());
        }
        self.stop_guard()
    }
    fn stop(&mut self) -> Result<(), String> {
        self.job("StopUnit")
    }
    fn start(&mut self) -> Result<(), String> {
        self.job("StartUnit")
    }
    fn restart(&mut self) -> Result<(), String> {
        self.job("RestartUnit")
    }
    fn healthy(&mut self) -> Result<(), String> {
        let state = self.active_state()?;
        if state == "active" {
            Ok(())
        } else {
            Err(format!(
                "{}: {} is {state:?}, not \"active\"",
                self.at(),
                self.unit
            ))
        }
    }
}
