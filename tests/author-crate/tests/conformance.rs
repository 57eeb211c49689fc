//! Acme against the conformance kit: one test per contract.

// ANCHOR: conformance
use std::sync::Arc;

use acme_cloud_controller_manager::{AcmeCloud, AcmeConfig};
use ccm_conformance::memory::MemoryCloud;

async fn provider_and_test_cloud() -> ccm_conformance::UnderTest {
    let cloud = MemoryCloud::new(AcmeCloud::NAME);
    let config = AcmeConfig {
        zone: "acme-1a".into(),
        region: "acme-1".into(),
        instances: Vec::new(),
    };
    // The memory cloud is its own TestCloud: the suite makes and breaks instances in it.
    (Arc::new(AcmeCloud::new(cloud.clone(), config)), cloud)
}

ccm_conformance::conformance_tests!(provider_and_test_cloud);
// ANCHOR_END: conformance
