//! Polling until a condition holds, for the tests that wait on a controller.

use std::future::Future;
use std::time::{Duration, Instant};

/// Polls `check` every `every` until it returns `Ok`, or panics after `timeout` naming
/// `what` and the last `Err` (what was still wrong).
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, every: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(last) if Instant::now() > deadline => {
                panic!("{what}: not reached after {timeout:?}; last: {last:.2000}")
            }
            Err(_) => tokio::time::sleep(every).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn returns_the_first_ok() {
        let mut n = 0;
        let got = wait_for(
            "three",
            Duration::from_secs(5),
            Duration::from_millis(1),
            || {
                n += 1;
                let v = n;
                async move {
                    if v >= 3 {
                        Ok(v)
                    } else {
                        Err(format!("{v}"))
                    }
                }
            },
        )
        .await;
        assert_eq!(got, 3);
    }

    #[tokio::test]
    #[should_panic(expected = "never: not reached after")]
    async fn panics_with_the_last_error() {
        wait_for::<(), _, _>(
            "never",
            Duration::from_millis(20),
            Duration::from_millis(5),
            || async { Err("still wrong".to_string()) },
        )
        .await;
    }
}
