"""boto3 with canned ACLs and Object Ownership (issue 16): put/get of bucket and object
ACLs, anonymous requests (an unsigned client) allowed exactly where an ACL allows them,
Block Public Access overriding ACLs, ACLs refused where Object Ownership is
BucketOwnerEnforced, and explicit grants to a second user and to the groups."""

import hashlib
import json

import boto3
import pytest
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

from conftest import make_s3_client
from test_users import admin, code_of, wait_until

ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"
AUTH_USERS = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers"


@pytest.fixture(scope="module")
def acl_users(cairn_server):
    made = {}
    for name in ("pyaclowner", "pyaclother"):
        k = json.loads(admin(cairn_server, "--json", "user", "add", name))
        made[name] = make_s3_client(cairn_server, k["access_key"], k["secret_key"])
    made["anonymous"] = boto3.session.Session().client(
        "s3", endpoint_url=cairn_server.endpoint, region_name=cairn_server.region,
        config=Config(signature_version=UNSIGNED))
    return made


def grants(acl):
    out = []
    for g in acl["Grants"]:
        who = g["Grantee"].get("DisplayName") or g["Grantee"]["URI"].rsplit("/", 1)[-1]
        out.append(who + ":" + g["Permission"])
    return sorted(out)


def refused(call, code="AccessDenied"):
    with pytest.raises(ClientError) as e:
        call()
    assert code_of(e) == code, e.value.response


def test_bucket_and_object_acls(cairn_server, acl_users):
    owner, other, anon = acl_users["pyaclowner"], acl_users["pyaclother"], acl_users["anonymous"]
    # ACLs are disabled in a new bucket: the public ones are refused.
    owner.create_bucket(Bucket="pyacl-enforced")
    refused(lambda: owner.put_object(Bucket="pyacl-enforced", Key="k", Body=b"x", ACL="public-read"),
            "AccessControlListNotSupported")
    owner.put_object(Bucket="pyacl-enforced", Key="k", Body=b"x", ACL="bucket-owner-full-control")
    refused(lambda: owner.create_bucket(Bucket="pyacl-public", ACL="public-read"), "InvalidBucketAclWithObjectOwnership")

    # ObjectWriter: ACLs count (the feature level may still be on its way on a new server).
    wait_until(lambda: owner.create_bucket(Bucket="pyacl-b", ObjectOwnership="ObjectWriter", ACL="public-read"))
    assert owner.get_bucket_ownership_controls(Bucket="pyacl-b")["OwnershipControls"]["Rules"] == [{"ObjectOwnership": "ObjectWriter"}]
    acl = owner.get_bucket_acl(Bucket="pyacl-b")
    assert acl["Owner"]["DisplayName"] == "pyaclowner"
    assert grants(acl) == ["AllUsers:READ", "pyaclowner:FULL_CONTROL"]
    owner.put_object(Bucket="pyacl-b", Key="private", Body=b"private")
    owner.put_object(Bucket="pyacl-b", Key="public", Body=b"public", ACL="public-read")
    owner.put_object(Bucket="pyacl-b", Key="members", Body=b"members", ACL="authenticated-read")

    # The bucket's public-read: anonymous listings; the objects' ACLs: their reads.
    assert sorted(o["Key"] for o in anon.list_objects_v2(Bucket="pyacl-b")["Contents"]) == ["members", "private", "public"]
    assert anon.get_object(Bucket="pyacl-b", Key="public")["Body"].read() == b"public"
    anon.head_object(Bucket="pyacl-b", Key="public")
    refused(lambda: anon.get_object(Bucket="pyacl-b", Key="private"))
    refused(lambda: anon.get_object(Bucket="pyacl-b", Key="members"))
    assert other.get_object(Bucket="pyacl-b", Key="members")["Body"].read() == b"members"
    refused(lambda: other.get_object(Bucket="pyacl-b", Key="private"))
    refused(lambda: anon.put_object(Bucket="pyacl-b", Key="anon", Body=b"x"))
    refused(lambda: anon.get_bucket_acl(Bucket="pyacl-b"))
    refused(lambda: other.put_object_acl(Bucket="pyacl-b", Key="public", ACL="private"))

    assert grants(owner.get_object_acl(Bucket="pyacl-b", Key="public")) == ["AllUsers:READ", "pyaclowner:FULL_CONTROL"]
    assert grants(owner.get_object_acl(Bucket="pyacl-b", Key="members")) == ["AuthenticatedUsers:READ", "pyaclowner:FULL_CONTROL"]

    # put_object_acl with the header and with a document.
    owner.put_object_acl(Bucket="pyacl-b", Key="private", ACL="public-read")
    assert anon.get_object(Bucket="pyacl-b", Key="private")["Body"].read() == b"private"
    me = owner.get_object_acl(Bucket="pyacl-b", Key="private")["Owner"]
    owner.put_object_acl(Bucket="pyacl-b", Key="private", AccessControlPolicy={
        "Owner": {"ID": me["ID"]},
        "Grants": [{"Grantee": {"Type": "CanonicalUser", "ID": me["ID"]}, "Permission": "FULL_CONTROL"}]})
    refused(lambda: anon.get_object(Bucket="pyacl-b", Key="private"))
    refused(lambda: owner.put_object_acl(Bucket="pyacl-b", Key="private", AccessControlPolicy={
        "Owner": {"ID": me["ID"]},
        "Grants": [{"Grantee": {"Type": "Group", "URI": "http://acs.amazonaws.com/groups/s3/LogDelivery"}, "Permission": "WRITE"}]}),
        "NotImplemented")

    # public-read-write on the bucket: anonymous writes; the other user's object is his.
    owner.put_bucket_acl(Bucket="pyacl-b", ACL="public-read-write")
    anon.put_object(Bucket="pyacl-b", Key="anon", Body=b"anon")
    other.put_object(Bucket="pyacl-b", Key="theirs", Body=b"theirs")
    assert other.get_object_acl(Bucket="pyacl-b", Key="theirs")["Owner"]["DisplayName"] == "pyaclother"
    listed = owner.list_objects(Bucket="pyacl-b", Prefix="theirs")["Contents"]
    assert listed[0]["Owner"]["DisplayName"] == "pyaclother"

    # Block Public Access: IgnorePublicAcls makes them grant nothing, BlockPublicAcls
    # refuses new ones.
    owner.put_public_access_block(Bucket="pyacl-b", PublicAccessBlockConfiguration={
        "BlockPublicAcls": True, "IgnorePublicAcls": True, "BlockPublicPolicy": False, "RestrictPublicBuckets": False})
    refused(lambda: anon.get_object(Bucket="pyacl-b", Key="public"))
    refused(lambda: anon.list_objects_v2(Bucket="pyacl-b"))
    refused(lambda: owner.put_object(Bucket="pyacl-b", Key="p2", Body=b"x", ACL="public-read"))
    refused(lambda: owner.put_bucket_acl(Bucket="pyacl-b", ACL="public-read"))
    owner.delete_public_access_block(Bucket="pyacl-b")
    assert anon.get_object(Bucket="pyacl-b", Key="public")["Body"].read() == b"public"

    # Back to BucketOwnerEnforced: only once the bucket's ACL is private.
    refused(lambda: owner.put_bucket_ownership_controls(Bucket="pyacl-b", OwnershipControls={
        "Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}), "InvalidBucketAclWithObjectOwnership")
    owner.put_bucket_acl(Bucket="pyacl-b", ACL="private")
    owner.put_bucket_ownership_controls(Bucket="pyacl-b", OwnershipControls={"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]})
    refused(lambda: anon.get_object(Bucket="pyacl-b", Key="public"))


def canonical_id(user):
    return hashlib.sha256(("cairn-user:" + user).encode()).hexdigest()


def test_explicit_grants(cairn_server, acl_users):
    """Grants to another user by canonical ID (headers and documents), to the groups, and
    their refusals; the second user's access follows the grants and their revocation."""
    owner, other, anon = acl_users["pyaclowner"], acl_users["pyaclother"], acl_users["anonymous"]
    me, them = canonical_id("pyaclowner"), canonical_id("pyaclother")
    # Explicit grant lists are kept once the server's feature level is 9 (it may be on its way).
    wait_until(lambda: owner.create_bucket(Bucket="pyacl-grants", ObjectOwnership="ObjectWriter",
                                           GrantRead='id="%s"' % them, GrantFullControl='id="%s"' % me))
    assert grants(owner.get_bucket_acl(Bucket="pyacl-grants")) == ["pyaclother:READ", "pyaclowner:FULL_CONTROL"]
    owner.put_object(Bucket="pyacl-grants", Key="k", Body=b"granted")
    assert [o["Key"] for o in other.list_objects_v2(Bucket="pyacl-grants")["Contents"]] == ["k"]
    refused(lambda: other.get_object(Bucket="pyacl-grants", Key="k"))
    refused(lambda: other.put_object(Bucket="pyacl-grants", Key="x", Body=b"x"))
    refused(lambda: other.get_bucket_acl(Bucket="pyacl-grants"))
    refused(lambda: anon.list_objects_v2(Bucket="pyacl-grants"))

    # A document: the other user may write and read the bucket's ACL.
    owner.put_bucket_acl(Bucket="pyacl-grants", AccessControlPolicy={
        "Owner": {"ID": me},
        "Grants": [{"Grantee": {"Type": "CanonicalUser", "ID": me}, "Permission": "FULL_CONTROL"},
                   {"Grantee": {"Type": "CanonicalUser", "ID": them}, "Permission": "WRITE"},
                   {"Grantee": {"Type": "CanonicalUser", "ID": them}, "Permission": "READ_ACP"}]})
    acl = other.get_bucket_acl(Bucket="pyacl-grants")
    assert grants(acl) == ["pyaclother:READ_ACP", "pyaclother:WRITE", "pyaclowner:FULL_CONTROL"]
    assert {g["Grantee"]["ID"] for g in acl["Grants"]} == {me, them}
    other.put_object(Bucket="pyacl-grants", Key="theirs", Body=b"theirs")
    refused(lambda: other.list_objects_v2(Bucket="pyacl-grants"))

    # Object grants: READ to the other user, then AllUsers; revoked by a canned ACL.
    owner.put_object_acl(Bucket="pyacl-grants", Key="k", GrantRead='id="%s"' % them, GrantFullControl='id="%s"' % me)
    assert grants(owner.get_object_acl(Bucket="pyacl-grants", Key="k")) == ["pyaclother:READ", "pyaclowner:FULL_CONTROL"]
    assert other.get_object(Bucket="pyacl-grants", Key="k")["Body"].read() == b"granted"
    refused(lambda: other.get_object_acl(Bucket="pyacl-grants", Key="k"))
    refused(lambda: anon.get_object(Bucket="pyacl-grants", Key="k"))
    owner.put_object_acl(Bucket="pyacl-grants", Key="k", GrantRead='uri="%s"' % ALL_USERS)
    assert grants(owner.get_object_acl(Bucket="pyacl-grants", Key="k")) == ["AllUsers:READ"]
    assert anon.get_object(Bucket="pyacl-grants", Key="k")["Body"].read() == b"granted"
    owner.put_object_acl(Bucket="pyacl-grants", Key="k", ACL="private")
    refused(lambda: other.get_object(Bucket="pyacl-grants", Key="k"))
    refused(lambda: anon.get_object(Bucket="pyacl-grants", Key="k"))

    # Refusals.
    refused(lambda: owner.put_bucket_acl(Bucket="pyacl-grants", GrantRead='id="%s"' % canonical_id("nobody")), "InvalidArgument")
    refused(lambda: owner.put_bucket_acl(Bucket="pyacl-grants", GrantRead='emailAddress="a@example.com"'), "UnresolvableGrantByEmailAddress")
    refused(lambda: owner.put_bucket_acl(Bucket="pyacl-grants", ACL="private", GrantRead='id="%s"' % them), "InvalidRequest")
    owner.create_bucket(Bucket="pyacl-grants-enforced")
    refused(lambda: owner.put_object(Bucket="pyacl-grants-enforced", Key="g", Body=b"x", GrantRead='id="%s"' % them),
            "AccessControlListNotSupported")
    assert grants(other.get_bucket_acl(Bucket="pyacl-grants")) == ["pyaclother:READ_ACP", "pyaclother:WRITE", "pyaclowner:FULL_CONTROL"]
