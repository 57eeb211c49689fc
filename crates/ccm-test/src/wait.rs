//! Waiting in tests: [`eventually`] asks again and again until a condition holds, and on
//! timeout panics with what it waited for and, if the check can say, what it last saw.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

/// How long [`eventually`] waits between two tries.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Runs `check` until it succeeds, every [`POLL_INTERVAL`], for up to `timeout`, and returns
/// what it succeeded with; panics if it has not succeeded by then.
///
/// `check` answers one of two [`Outcome`]s:
///
/// - `bool`: `true` when the condition holds;
/// - `Result<T, E>` with `E: Display`: `Ok(value)` when the condition holds, `Err(state)`
///   otherwise, where `state` says what the check saw. The last `state` is quoted in the
///   panic message, so a failing test says where things stood. A `kube::Error` works as
///   it is (retrying a request until it succeeds); for an object, format it
///   (`Err(format!("{node:#?}"))`).
///
/// It tries at least once, and once more at or after the deadline, so a slow check cannot
/// time out untried. The message is `timed out after {timeout:?} waiting for: {what}`,
/// then `last seen: {state}` on its own line.
///
/// It waits on Tokio's clock, so under `tokio::time::pause()` (`#[tokio::test(start_paused
/// = true)]`) the waiting takes no real time. A check that must see something stay *as it
/// is* for a while is not for this function: sleep, then assert.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use std::time::Duration;
///
/// use ccm_test::eventually;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// // Something reaches its state in the background, as a controller would.
/// let count = Arc::new(AtomicU32::new(0));
/// tokio::spawn({
///     let count = count.clone();
///     async move {
///         for _ in 0..3 {
///             tokio::time::sleep(Duration::from_millis(20)).await;
///             count.fetch_add(1, Ordering::SeqCst);
///         }
///     }
/// });
///
/// // A bool: wait until it holds.
/// eventually("the first step", Duration::from_secs(30), || async {
///     count.load(Ordering::SeqCst) >= 1
/// })
/// .await;
///
/// // A Result: its value, or (on timeout) the last state seen in the panic message.
/// let seen = eventually("all three steps", Duration::from_secs(30), || async {
///     match count.load(Ordering::SeqCst) {
///         3 => Ok(3),
///         n => Err(format!("{n} steps")),
///     }
/// })
/// .await;
/// assert_eq!(seen, 3);
/// # }
/// ```
pub async fn eventually<O, F, Fut>(what: &str, timeout: Duration, mut check: F) -> O::Output
where
    O: Outcome,
    F: FnMut() -> Fut,
    Fut: Future<Output = O>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let seen = match check().await.into_result() {
            Ok(value) => return value,
            Err(seen) => seen,
        };
        if tokio::time::Instant::now() >= deadline {
            match seen {
                Some(seen) => {
                    panic!("timed out after {timeout:?} waiting for: {what}\nlast seen: {seen}")
                }
                None => panic!("timed out after {timeout:?} waiting for: {what}"),
            }
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// What one try of an [`eventually`] check answers: whether the condition holds, with
/// the value to return if it does, or what was seen if it does not.
pub trait Outcome {
    /// What [`eventually`] returns once the condition holds.
    type Output;

    /// `Ok` with the value when the condition holds; otherwise `Err` with what was seen,
    /// if there is something to say.
    fn into_result(self) -> Result<Self::Output, Option<String>>;
}

impl Outcome for bool {
    type Output = ();

    fn into_result(self) -> Result<(), Option<String>> {
        if self { Ok(()) } else { Err(None) }
    }
}

impl<T, E: Display> Outcome for Result<T, E> {
    type Output = T;

    fn into_result(self) -> Result<T, Option<String>> {
        self.map_err(|seen| Some(seen.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::future::Future;

    use super::*;

    /// Runs `wait` in a task of its own and returns its panic message.
    async fn panic_message(wait: impl Future<Output = ()> + Send + 'static) -> String {
        let err = tokio::spawn(wait)
            .await
            .expect_err("it should have panicked");
        let payload = err.into_panic();
        match payload.downcast::<String>() {
            Ok(message) => *message,
            Err(payload) => (*payload.downcast::<&str>().expect("a string panic")).to_owned(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn returns_the_value_once_the_condition_holds() {
        let tries = Cell::new(0);
        let started = tokio::time::Instant::now();
        let value = eventually("the third try", Duration::from_secs(10), || async {
            tries.set(tries.get() + 1);
            if tries.get() == 3 {
                Ok("done")
            } else {
                Err(format!("try {}", tries.get()))
            }
        })
        .await;
        assert_eq!(value, "done");
        assert_eq!(tries.get(), 3);
        assert_eq!(started.elapsed(), 2 * POLL_INTERVAL);
    }

    #[tokio::test(start_paused = true)]
    async fn a_bool_that_holds_at_once_returns_without_waiting() {
        let started = tokio::time::Instant::now();
        eventually("true", Duration::ZERO, || async { true }).await;
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_timeout_names_what_and_the_last_state_seen() {
        let started = tokio::time::Instant::now();
        let message = panic_message(async {
            let mut tries = 0;
            eventually("the impossible", Duration::from_secs(1), || {
                tries += 1;
                let seen = format!("state {tries}");
                async move { Err::<(), _>(seen) }
            })
            .await;
        })
        .await;
        // One try at the start and one every interval until the deadline, inclusive.
        let tries = Duration::from_secs(1).as_millis() / POLL_INTERVAL.as_millis() + 1;
        assert_eq!(
            message,
            format!("timed out after 1s waiting for: the impossible\nlast seen: state {tries}")
        );
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(1),
            "not before the deadline"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_bool_timeout_names_what() {
        let message = panic_message(async {
            eventually("never", Duration::from_millis(200), || async { false }).await;
        })
        .await;
        assert_eq!(message, "timed out after 200ms waiting for: never");
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_error_is_the_state_seen() {
        let message = panic_message(async {
            eventually("the request", Duration::from_secs(1), || async {
                Err::<(), _>(std::io::Error::other("connection refused"))
            })
            .await;
        })
        .await;
        assert!(
            message.ends_with("\nlast seen: connection refused"),
            "{message}"
        );
    }
}
