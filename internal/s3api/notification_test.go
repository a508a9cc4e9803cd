package s3api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairnfs/cairn/internal/notify"
	"github.com/cairnfs/cairn/internal/s3api"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/testutil"
)

func prefixFilter(prefix, suffix string) *types.NotificationConfigurationFilter {
	var rules []types.FilterRule
	if prefix != "" {
		rules = append(rules, types.FilterRule{Name: types.FilterRuleNamePrefix, Value: aws.String(prefix)})
	}
	if suffix != "" {
		rules = append(rules, types.FilterRule{Name: types.FilterRuleNameSuffix, Value: aws.String(suffix)})
	}
	return &types.NotificationConfigurationFilter{Key: &types.S3KeyFilter{FilterRules: rules}}
}

// TestBucketNotificationConfig: PutBucketNotificationConfiguration and its Get through
// aws-sdk-go-v2 on a real socket: a round trip, every refusal S3 makes (each leaving the
// stored configuration as it was), and the empty configuration that turns them off.
func TestBucketNotificationConfig(t *testing.T) {
	srv := testutil.StartServer(t, store.Config{Reserve: 1}, func(c *s3api.Config) {
		c.NotifyTarget = func(name string) bool { return name == "hook" || name == "jobs" }
	})
	c := newClient(t, srv.URL, testutil.AccessKey, testutil.SecretKey)
	ctx := context.Background()
	mustCreateBucket(t, c, "events")

	get := func() *s3.GetBucketNotificationConfigurationOutput {
		t.Helper()
		out, err := c.GetBucketNotificationConfiguration(ctx, &s3.GetBucketNotificationConfigurationInput{Bucket: aws.String("events")})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	put := func(nc *types.NotificationConfiguration) error {
		_, err := c.PutBucketNotificationConfiguration(ctx, &s3.PutBucketNotificationConfigurationInput{Bucket: aws.String("events"), NotificationConfiguration: nc})
		return err
	}
	if out := get(); len(out.QueueConfigurations)+len(out.TopicConfigurations) != 0 {
		t.Fatalf("a new bucket has a configuration: %+v", out)
	}
	_, err := c.GetBucketNotificationConfiguration(ctx, &s3.GetBucketNotificationConfigurationInput{Bucket: aws.String("nobucket")})
	wantCode(t, err, "NoSuchBucket")

	good := &types.NotificationConfiguration{
		QueueConfigurations: []types.QueueConfiguration{{
			Id: aws.String("images"), QueueArn: aws.String(notify.QueueARN("jobs")),
			Events: []types.Event{"s3:ObjectCreated:*"}, Filter: prefixFilter("img/", ".jpg"),
		}},
		TopicConfigurations: []types.TopicConfiguration{{
			TopicArn: aws.String(notify.TopicARN("hook")),
			Events:   []types.Event{"s3:ObjectRemoved:Delete", "s3:ObjectRemoved:DeleteMarkerCreated"},
		}},
	}
	if err := put(good); err != nil {
		t.Fatal(err)
	}
	check := func() {
		t.Helper()
		out := get()
		if len(out.QueueConfigurations) != 1 || len(out.TopicConfigurations) != 1 {
			t.Fatalf("got %+v", out)
		}
		q, tp := out.QueueConfigurations[0], out.TopicConfigurations[0]
		if aws.ToString(q.Id) != "images" || aws.ToString(q.QueueArn) != "arn:cairn:sqs:::jobs" || len(q.Events) != 1 || q.Events[0] != "s3:ObjectCreated:*" {
			t.Fatalf("queue %+v", q)
		}
		fr := q.Filter.Key.FilterRules
		if len(fr) != 2 || fr[0].Name != types.FilterRuleNamePrefix || aws.ToString(fr[0].Value) != "img/" || fr[1].Name != types.FilterRuleNameSuffix || aws.ToString(fr[1].Value) != ".jpg" {
			t.Fatalf("filter %+v", fr)
		}
		if aws.ToString(tp.Id) == "" || aws.ToString(tp.TopicArn) != "arn:cairn:sns:::hook" || len(tp.Events) != 2 {
			t.Fatalf("topic %+v (an id is given to a rule sent without one)", tp)
		}
	}
	check()

	queue := func(arn string, events []types.Event, f *types.NotificationConfigurationFilter) types.QueueConfiguration {
		return types.QueueConfiguration{QueueArn: aws.String(arn), Events: events, Filter: f}
	}
	created := []types.Event{"s3:ObjectCreated:Put"}
	for _, bad := range []struct {
		name string
		nc   types.NotificationConfiguration
		code string
	}{
		{"unknown event", types.NotificationConfiguration{QueueConfigurations: []types.QueueConfiguration{queue(notify.QueueARN("jobs"), []types.Event{"s3:ObjectCreated:Rename"}, nil)}}, "InvalidArgument"},
		{"event cairn cannot tell", types.NotificationConfiguration{QueueConfigurations: []types.QueueConfiguration{queue(notify.QueueARN("jobs"), []types.Event{"s3:ObjectCreated:Copy"}, nil)}}, "NotImplemented"},
		{"unknown target", types.NotificationConfiguration{QueueConfigurations: []types.QueueConfiguration{queue(notify.QueueARN("nosuch"), created, nil)}}, "InvalidArgument"},
		{"foreign ARN", types.NotificationConfiguration{QueueConfigurations: []types.QueueConfiguration{queue("arn:aws:sqs:us-east-1:123456789012:jobs", created, nil)}}, "InvalidArgument"},
		{"topic ARN in a queue", types.NotificationConfiguration{QueueConfigurations: []types.QueueConfiguration{queue(notify.TopicARN("jobs"), created, nil)}}, "InvalidArgument"},
		{"overlap", types.NotificationConfiguration{QueueConfigurations: []types.QueueConfiguration{
			queue(notify.QueueARN("jobs"), []types.Event{"s3:ObjectCreated:*"}, prefixFilter("a/", "")),
			queue(notify.QueueARN("hook"), created, prefixFilter("a/b/", ".txt")),
		}}, "InvalidArgument"},
		{"two prefixes", types.NotificationConfiguration{QueueConfigurations: []types.QueueConfiguration{queue(notify.QueueARN("jobs"), created,
			&types.NotificationConfigurationFilter{Key: &types.S3KeyFilter{FilterRules: []types.FilterRule{{Name: "prefix", Value: aws.String("a")}, {Name: "prefix", Value: aws.String("b")}}}})}}, "InvalidArgument"},
		{"bad filter name", types.NotificationConfiguration{QueueConfigurations: []types.QueueConfiguration{queue(notify.QueueARN("jobs"), created,
			&types.NotificationConfigurationFilter{Key: &types.S3KeyFilter{FilterRules: []types.FilterRule{{Name: "middle", Value: aws.String("a")}}}})}}, "InvalidArgument"},
		{"duplicate ids", types.NotificationConfiguration{QueueConfigurations: []types.QueueConfiguration{
			{Id: aws.String("x"), QueueArn: aws.String(notify.QueueARN("jobs")), Events: created, Filter: prefixFilter("a/", "")},
			{Id: aws.String("x"), QueueArn: aws.String(notify.QueueARN("jobs")), Events: created, Filter: prefixFilter("b/", "")},
		}}, "InvalidArgument"},
		{"lambda", types.NotificationConfiguration{LambdaFunctionConfigurations: []types.LambdaFunctionConfiguration{{LambdaFunctionArn: aws.String("arn:aws:lambda:us-east-1:1:function:f"), Events: created}}}, "InvalidArgument"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			wantCode(t, put(&bad.nc), bad.code)
			check() // nothing changed
		})
	}
	// Not XML at all.
	r := signed(t, http.MethodPut, srv.URL+"/events?notification", []byte("<NotificationConfiguration><QueueConfiguration>"), nil, time.Now())
	status, body := do(t, r)
	expectS3Error(t, status, body, 400, "MalformedXML")
	check()
	_, err = c.PutBucketNotificationConfiguration(ctx, &s3.PutBucketNotificationConfigurationInput{Bucket: aws.String("nobucket"), NotificationConfiguration: good})
	wantCode(t, err, "NoSuchBucket")

	// An empty configuration turns notifications off.
	if err := put(&types.NotificationConfiguration{}); err != nil {
		t.Fatal(err)
	}
	if out := get(); len(out.QueueConfigurations)+len(out.TopicConfigurations) != 0 {
		t.Fatalf("still configured: %+v", out)
	}
}
