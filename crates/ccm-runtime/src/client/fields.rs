//! Fields whose type depends on the Kubernetes version k8s-openapi is built for.
//!
//! The provider's binary picks that version (a `v1_XX` feature of k8s-openapi), so this
//! crate compiles against every version k8s-openapi supports. A few fields changed between
//! them: Kubernetes 1.36's OpenAPI made `TokenRequest.spec`, `TokenRequestStatus.token` and
//! `TokenRequestStatus.expirationTimestamp` optional (`Option<T>` in k8s-openapi's 1.36 and
//! later types, `T` before), and `TokenReviewSpec.token` required (`String` from 1.36,
//! `Option<String>` before). The JSON on the wire is the same at every version; these two
//! functions let one line of code set or read such a field whichever type it has.

/// A field's value, for a field typed `T` at some Kubernetes versions and `Option<T>` at
/// others: `value` itself, or `Some(value)`.
pub(crate) fn field<T, F: From<T>>(value: T) -> F {
    F::from(value)
}

/// A field typed `T` at some Kubernetes versions and `Option<T>` at others, read as an
/// `Option<T>` (name `T`: `optional::<String>(status.token)`).
pub(crate) fn optional<T>(field: impl Into<Option<T>>) -> Option<T> {
    field.into()
}

#[cfg(test)]
mod tests {
    use super::{field, optional};
    use k8s_openapi::api::authentication::v1::{
        TokenRequest, TokenRequestSpec, TokenRequestStatus, TokenReview, TokenReviewSpec,
    };

    /// Whatever the version, the fields set through `field` are on the wire, and those read
    /// through `optional` come back from it.
    #[test]
    fn fields_round_trip_at_the_version_built_for() {
        let request = TokenRequest {
            spec: field(TokenRequestSpec {
                expiration_seconds: Some(600),
                ..TokenRequestSpec::default()
            }),
            ..TokenRequest::default()
        };
        let json = serde_json::to_value(&request).expect("serialise");
        assert_eq!(json["spec"]["expirationSeconds"], 600, "{json}");

        let review = TokenReview {
            spec: TokenReviewSpec {
                token: field("abc".to_owned()),
                ..TokenReviewSpec::default()
            },
            ..TokenReview::default()
        };
        let json = serde_json::to_value(&review).expect("serialise");
        assert_eq!(json["spec"]["token"], "abc", "{json}");

        let status: TokenRequestStatus = serde_json::from_value(serde_json::json!({
            "token": "t0k",
            "expirationTimestamp": "2030-01-02T03:04:05Z",
        }))
        .expect("deserialise");
        assert_eq!(optional::<String>(status.token).as_deref(), Some("t0k"));
        let expires = optional::<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>(
            status.expiration_timestamp,
        )
        .expect("an expiration");
        assert_eq!(expires.0.to_string(), "2030-01-02T03:04:05Z");
    }
}
