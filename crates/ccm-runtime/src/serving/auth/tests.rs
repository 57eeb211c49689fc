//! Unit tests of `auth`.

use super::*;

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn always_allowed_paths_match_as_go() {
    let m = PathMatcher::new(&strings(&["/healthz", "readyz", "/debug/*", "/"])).unwrap();
    for yes in [
        "/healthz",
        "healthz",
        "/readyz",
        "/debug/",
        "/debug/pprof/heap",
        "/",
        "",
    ] {
        assert!(m.matches(yes), "{yes}");
    }
    for no in ["/healthz/ping", "/healthzx", "/metrics", "/debug", "/livez"] {
        assert!(!m.matches(no), "{no}");
    }
    let all = PathMatcher::new(&strings(&["*"])).unwrap();
    assert!(all.matches("/metrics") && all.matches("/"));
    assert_eq!(
        PathMatcher::new(&strings(&["/a*b*"])).unwrap_err(),
        "only trailing * allowed in \"a*b*\""
    );
    let none = PathMatcher::new(&[]).unwrap();
    assert!(!none.matches("/healthz"));
}

#[test]
fn bearer_tokens_are_read_as_go() {
    let h = |v: &str| {
        let mut m = HeaderMap::new();
        m.insert(header::AUTHORIZATION, v.parse().unwrap());
        m
    };
    assert_eq!(bearer_token(&h("Bearer abc")), Some("abc"));
    assert_eq!(bearer_token(&h("bearer abc extra")), Some("abc"));
    assert_eq!(bearer_token(&h("  Bearer abc  ")), Some("abc"));
    assert_eq!(bearer_token(&h("Basic abc")), None);
    assert_eq!(bearer_token(&h("Bearer")), None);
    assert_eq!(
        bearer_token(&h("Bearer  abc")),
        None,
        "Go splits on single spaces"
    );
    assert_eq!(bearer_token(&HeaderMap::new()), None);
}

#[test]
fn request_headers_make_a_user() {
    let config = RequestHeaderConfig::new(
        vec![],
        strings(&["X-Remote-User", "X-Other-User"]),
        strings(&["X-Remote-Uid"]),
        strings(&["X-Remote-Group"]),
        strings(&["X-Remote-Extra-"]),
    );
    let mut h = HeaderMap::new();
    assert_eq!(
        config.user(&h),
        None,
        "no user name: not this authenticator"
    );
    h.insert("x-other-user", "bob".parse().unwrap());
    h.append("x-remote-group", "a".parse().unwrap());
    h.append("x-remote-group", "b".parse().unwrap());
    h.insert("x-remote-uid", "42".parse().unwrap());
    h.insert("x-remote-extra-scopes%2fone", "s1".parse().unwrap());
    let user = config.user(&h).unwrap();
    assert_eq!(user.name, "bob");
    assert_eq!(user.uid, "42");
    assert_eq!(user.groups, ["a", "b"]);
    assert_eq!(user.extra["scopes/one"], ["s1"]);
    assert_eq!(
        user.authenticated().groups,
        ["a", "b", "system:authenticated"]
    );
}

#[test]
fn cache_is_bounded_and_expires() {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(async {
            let cache = TtlCache::new(3);
            cache.insert(1, "a", Duration::from_secs(10));
            cache.insert(2, "b", Duration::from_secs(20));
            cache.insert(3, "c", Duration::from_secs(30));
            cache.insert(4, "d", Duration::from_secs(40));
            assert_eq!(cache.len(), 3);
            assert_eq!(cache.get(&1), None, "the one closest to expiry went");
            assert_eq!(cache.get(&4), Some("d"));
            cache.insert(5, "e", Duration::ZERO);
            assert_eq!(cache.get(&5), None, "a zero TTL is not cached");
            tokio::time::advance(Duration::from_secs(25)).await;
            assert_eq!(cache.get(&2), None, "expired");
            assert_eq!(cache.get(&3), Some("c"));
            cache.insert(6, "f", Duration::from_secs(1));
            cache.insert(7, "g", Duration::from_secs(1));
            assert!(cache.len() <= 3);
            assert_eq!(cache.get(&4), Some("d"));
        });
}

#[test]
fn configmap_data_is_read() {
    let data: BTreeMap<String, String> = [
        ("client-ca-file", "PEM"),
        ("requestheader-client-ca-file", ""),
        ("requestheader-username-headers", "[\"X-Remote-User\"]"),
        ("requestheader-allowed-names", "[\"front-proxy-client\"]"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let found = ClusterAuthentication::from_data(&data).unwrap();
    assert_eq!(found.client_ca.as_deref(), Some("PEM"));
    assert_eq!(found.requestheader_ca, None);
    assert_eq!(found.request_header.username_headers, ["X-Remote-User"]);
    assert_eq!(found.request_header.allowed_names, ["front-proxy-client"]);
    let mut bad = data;
    bad.insert("requestheader-group-headers".to_owned(), "nope".to_owned());
    assert!(
        ClusterAuthentication::from_data(&bad)
            .unwrap_err()
            .starts_with("requestheader-group-headers")
    );
}

#[tokio::test]
async fn anonymous_and_always_allowed_without_a_cluster() {
    let auth = DelegatedAuth::new(PathMatcher::new(&strings(&["/healthz"])).unwrap());
    let headers = HeaderMap::new();
    let user = auth.authenticate(&headers, &[]).await.unwrap();
    assert_eq!(user, UserInfo::anonymous());
    assert_eq!(
        auth.authorize(&user, "/healthz", "get").await,
        Ok(Decision::Allow)
    );
    assert_eq!(
        auth.authorize(&user, "/metrics", "get").await,
        Ok(Decision::Deny(String::new()))
    );
    let masters = UserInfo {
        name: "admin".to_owned(),
        groups: strings(&["system:masters"]),
        ..UserInfo::default()
    };
    assert_eq!(
        auth.authorize(&masters, "/metrics", "get").await,
        Ok(Decision::Allow)
    );
    let response = auth
        .check(&headers, &[], &http::Method::GET, "/metrics")
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    use http_body_util::BodyExt as _;
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        std::str::from_utf8(&body).unwrap(),
        "{\"apiVersion\":\"v1\",\"code\":403,\"details\":{},\"kind\":\"Status\",\"message\":\"forbidden: User \\\"system:anonymous\\\" cannot get path \\\"/metrics\\\"\",\"metadata\":{},\"reason\":\"Forbidden\",\"status\":\"Failure\"}\n"
    );
    assert!(
        auth.check(&headers, &[], &http::Method::GET, "/healthz")
            .await
            .is_none()
    );
}

#[test]
fn percent_decoding() {
    assert_eq!(percent_decode("a%2Fb"), "a/b");
    assert_eq!(percent_decode("a%2"), "a%2");
    assert_eq!(percent_decode("%zz"), "%zz");
    assert_eq!(percent_decode("%"), "%");
}
