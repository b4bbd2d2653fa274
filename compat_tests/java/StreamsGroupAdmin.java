// The Java Admin's view of a streams group (KIP-1071), for compat_tests/kafka/test_kafka_streams.py.
//
// usage: StreamsGroupAdmin BOOTSTRAP GROUP_ID
//
// Prints one line: the group's type as Admin.listGroups reports it, then what
// Admin.describeStreamsGroups says: its state, the topology's subtopology ids, and each member's
// active tasks as "subtopology:partition" sorted, e.g.
//   type=STREAMS state=STABLE subtopologies=0,1 members=1 active=0:0,0:1,0:2,1:0,1:1,1:2

import java.util.*;

import org.apache.kafka.clients.admin.*;

public class StreamsGroupAdmin {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        String group = args[1];
        try (Admin admin = Admin.create(props)) {
            String type = "none";
            for (GroupListing listing : admin.listGroups().all().get()) {
                if (listing.groupId().equals(group)) {
                    type = listing.type().map(Object::toString).orElse("unknown");
                }
            }
            StreamsGroupDescription d = admin.describeStreamsGroups(List.of(group)).all().get().get(group);
            List<String> subtopologies = new ArrayList<>();
            for (StreamsGroupSubtopologyDescription s : d.subtopologies()) {
                subtopologies.add(s.subtopologyId());
            }
            Collections.sort(subtopologies);
            List<String> active = new ArrayList<>();
            for (StreamsGroupMemberDescription m : d.members()) {
                for (StreamsGroupMemberAssignment.TaskIds t : m.assignment().activeTasks()) {
                    for (int p : t.partitions()) {
                        active.add(t.subtopologyId() + ":" + p);
                    }
                }
            }
            Collections.sort(active);
            System.out.println("type=" + type + " state=" + d.groupState() + " subtopologies="
                               + String.join(",", subtopologies) + " members=" + d.members().size()
                               + " active=" + String.join(",", active));
        }
    }
}
